// Backpressure from shards to pollers (poller_sink.hpp, binding::held): a peer whose
// pushes hold more than their limit at the shards is not read until the shards release
// half of it. Its frames wait in its socket, then in its own send buffer: the poller's
// memory stays bounded, and so does the shards' mailbox, whatever the peer sends.

#include <chrono>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/detail/poller_sink.hpp"

namespace rw::actors::detail {

void resume_reading(poller_ptr self) {
  auto& paused = self->state.book->paused;
  if (paused.empty())
    return;
  auto& bindings = self->state.book->bindings;
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < paused.size();) {
    auto& c = paused[i];
    auto it = bindings.find(c->id());
    bool gone = it == bindings.end() || !c->is_open();
    if (!gone) {
      auto& b = it->second;
      if (b.held->load(std::memory_order_relaxed) > b.held_limit / 2) {
        ++i;
        continue;
      }
      b.paused = false;
      c->pause_reading(false);
      spdlog::debug("reading resumed: peer={} job={} rank={} after {} ms (pause {})", c->peer(),
                    b.job_id, b.rank,
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - b.paused_at)
                      .count(),
                    b.pauses);
    }
    paused[i] = std::move(paused.back());
    paused.pop_back();
  }
}

} // namespace rw::actors::detail
