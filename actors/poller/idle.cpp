// A poller with no job left gives its receive buffers back (poller/sink.hpp,
// release_idle_buffers): a step of a large job may have held many of them (under BSP a
// shard keeps each rank's chunk until every rank's is in), and a node that served such a
// job must not keep that memory once the job is over (bench/memory.sh measures it), nor
// the free pages of malloc's arenas.

#include <chrono>

#include <malloc.h>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"
#include "rackweave/defaults.hpp"

namespace rw::actors::detail {

namespace {
constexpr auto idle_check_every = std::chrono::seconds(1);
} // namespace

void release_idle_buffers(poller_ptr self) {
  auto& st = self->state;
  auto now = std::chrono::steady_clock::now();
  if (now < st.next_idle_check)
    return;
  st.next_idle_check = now + idle_check_every;
  for (auto& [id, b] : st.book->bindings)
    if (b.status == binding::joined)
      return; // a job is served: its buffers are reused step after step
  size_t freed = 0;
  for (auto it = st.book->pools.begin(); it != st.book->pools.end();) {
    auto& [bytes, pool] = *it;
    if (bytes == defaults::chunk_bytes) { // the start's pool, back to its start size
      freed += pool->trim(st.settings.prealloc_buffers);
      ++it;
      continue;
    }
    if (pool->free_count() != pool->allocated()) {
      ++it; // a buffer is still out (a shard finishing its last step): next time
      continue;
    }
    freed += pool->allocated() * pool->buffer_bytes();
    it = st.book->pools.erase(it); // made for one job's chunk size: gone with its slabs
  }
  if (freed == 0)
    return;
  // The job's small allocations (messages, bindings, bookkeeping) were freed into
  // malloc's per-thread arenas, whose touched pages stay resident: give the free ones
  // back too, once per job that ended (bench/soak.sh: RSS flat over hundreds of jobs).
  ::malloc_trim(0);
  spdlog::info("poller of {}: no job left: {:.1f} MiB of receive buffers given back",
               st.ep->describe(), double(freed) / (1 << 20));
}

} // namespace rw::actors::detail
