#pragma once
// A shard's side of a job changing nodes while it runs (chunk_shard.hpp: "fence",
// "reshape", "takeover"): chunks settling at a clock boundary and the copy taken then,
// chunks kept in place under new routes when a node died, and pushes routed by a ring
// the job has left. Pure logic on a shard_job; the shard actor sends what comes out.

#include <cstdint>
#include <string>

#include "actors/shard/job.hpp"

namespace rw::actors::detail {

/// Whether a push or init was routed by a ring the job has left: the shard drops it
/// unanswered (a home would count what the new ring's replica never sees); the worker
/// sends it again by the new ring after the reroute.
inline bool stale_ring(const shard_job& job, const chunk_push& p) {
  return p.ring != 0 && p.ring < static_cast<uint32_t>(job.ring_version);
}

/// A worker's push routed by a ring the job has left, so dropped (the worker sends it
/// again after the reroute)? After a takeover (retarget) not: every chunk homed here
/// now was here before, so a push an older ring routed here (from kept_from on) went
/// to the chunk's home then as now. It counts, and the reroute says so (kept_pushes):
/// only the dead node's chunks come again.
inline bool stale_push(const shard_job& job, const chunk_push& p) {
  auto floor = job.kept_from != 0 ? job.kept_from : job.ring_version;
  return p.ring != 0 && p.ring < static_cast<uint32_t>(floor);
}

/// Why the job cannot move at a clock boundary ("" if it can).
std::string cannot_settle(const shard_job& job);

/// The move's first phase: how far each tensor of a layer-wise job got on shard `index`
/// (the highest chunk_state::settle_reach of the chunks homed here); empty for any
/// other job.
settle_targets settle_reach(shard_job& job, uint32_t index);

/// A settling job: whether a push of (tensor, clock) to chunk `cs` still counts. For a
/// layer-wise job's tensor, a clock below the tensor's target; else what the chunk began.
bool settling_admits(const shard_job& job, uint32_t tensor, const chunk_state& cs,
                     uint64_t clock);

/// A settling job: once every chunk homed on shard `index` has settled, their copy goes
/// to the reply waiting for it (the fence's) and the job freezes. Does nothing otherwise.
void check_settled(shard_job& job, uint32_t index);

/// A node of the job died: the chunks of shard `index` go on by `rc.routes`, each
/// keeping its state (every chunk the new routes put here was here before); the ones
/// not served here any more are dropped (`released` says how many). "" or why not.
std::string retarget(shard_job& job, uint32_t index, const route_change& rc,
                     size_t& released);

} // namespace rw::actors::detail
