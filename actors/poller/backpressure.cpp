// Backpressure from shards to pollers (poller/sink.hpp, binding::held): a peer whose
// pushes hold more than their limit at the shards is not read until the shards release
// half of it. Its frames wait in its socket, then in its own send buffer: the poller's
// memory stays bounded, and so does the shards' mailbox, whatever the peer sends.

#include <chrono>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"

namespace rw::actors::detail {

void hold_against(poller_book& book, const transports::connection_ptr& c, binding& b,
                  runtime::payload& push) {
  push.charge(b.held, static_cast<int64_t>(push.capacity()));
  if (b.paused || b.held->load(std::memory_order_relaxed) <= b.held_limit)
    return;
  b.paused = true;
  b.paused_at = std::chrono::steady_clock::now();
  c->pause_reading(true);
  book.paused.push_back(c);
  spdlog::log(
    b.pauses++ == 0 ? spdlog::level::warn : spdlog::level::debug,
    "reading paused: peer={} job={} rank={}: its pushes hold {} MiB at the shards "
    "(at most {} MiB: four steps of its chunks here); its frames wait in the "
    "socket until the shards release half",
    c->peer(), b.job_id, b.rank, b.held->load() >> 20, b.held_limit >> 20);
}

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
      spdlog::debug(
        "reading resumed: peer={} job={} rank={} after {} ms (pause {})", c->peer(),
        b.job_id, b.rank,
        std::chrono::duration_cast<std::chrono::milliseconds>(now - b.paused_at).count(),
        b.pauses);
    }
    paused[i] = std::move(paused.back());
    paused.pop_back();
  }
}

} // namespace rw::actors::detail
