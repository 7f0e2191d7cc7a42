#pragma once
// A shard's part of a checkpoint (BSP): the state of each of its chunks of a job at
// one clock c. A chunk already at version c is copied at once (between steps its state
// is exactly version c); a chunk below c is copied by checkpoint_reached, called right
// after its step to version c completes and before any push held for the next step is
// applied. A chunk past c, or in the middle of a layer-wise step at c, cannot give c
// any more: the checkpoint fails. Copies happen only at a checkpoint's clock; ordinary
// steps pay one test of an empty vector.

#include <string>
#include <utility>
#include <vector>

#include "actors/shard/job.hpp"

namespace rw::actors::detail {

/// `clock` == now_clock: every chunk as it stands (a finished job; the caller checks
/// that all are at one version).
constexpr uint64_t now_clock = UINT64_MAX;

struct started_checkpoint : pending_checkpoint {
  std::string error; // why the checkpoint cannot be taken ("" if it can)
};

/// Starts a checkpoint of `job` at `clock`. each_chunk(fn) calls fn(tensor, chunk,
/// state) for each of the shard's chunks of the job (fn returns true to go on).
template <class EachChunk>
started_checkpoint start_checkpoint(shard_job& job, uint64_t clock, EachChunk each_chunk);

/// Whether a chunk's step to `version` is a checkpoint's clock for this job.
inline bool checkpoint_clock(const shard_job& job, uint64_t version) {
  return !job.checkpoints.empty()
         || (job.checkpoint_every != 0 && version % job.checkpoint_every == 0);
}

/// The chunk's step to cs.version() just completed: copies it into every pending
/// checkpoint at that clock and answers those now complete. Returns a periodic
/// checkpoint's copies once every chunk of the shard is in (null chunks otherwise); for
/// a job whose chunks moved between shards, once every chunk here is past the clock.
chunk_snapshot checkpoint_reached(shard_job& job, uint32_t tensor, uint32_t chunk,
                                  const chunk_state& cs);

/// Whether every chunk the shard holds of `job` is at `clock` or past it (a job whose
/// chunks moved between shards sends a periodic checkpoint's copies then: each chunk
/// was copied on the shard where it reached the clock).
bool every_chunk_reached(const shard_job& job, uint64_t clock);

/// Chunks left the shard: the periodic checkpoints every remaining chunk has reached,
/// taken out of the job, to send.
std::vector<std::pair<uint64_t, chunk_snapshot>> take_complete_periodic(shard_job& job);

/// Fails every pending checkpoint of the job (it ended) with `why`.
void fail_checkpoints(shard_job& job, const std::string& why);

/// Why a chunk at `cs` cannot be part of a checkpoint at `clock` ("" if it can).
std::string cannot_checkpoint(const shard_job& job, uint32_t tensor, uint32_t chunk,
                              const chunk_state& cs, uint64_t clock);

template <class EachChunk>
started_checkpoint start_checkpoint(shard_job& job, uint64_t clock,
                                    EachChunk each_chunk) {
  started_checkpoint p;
  p.clock = clock;
  p.taken.chunks = std::make_shared<std::vector<runtime::checkpoint::chunk_record>>();
  each_chunk([&](uint32_t t, uint32_t c, chunk_state& cs) {
    p.error = cannot_checkpoint(job, t, c, cs, clock);
    if (!p.error.empty())
      return false;
    if (clock == now_clock || cs.version() == clock)
      p.taken.chunks->push_back(cs.snapshot(t, c));
    else
      ++p.remaining;
    return true;
  });
  return p;
}

} // namespace rw::actors::detail
