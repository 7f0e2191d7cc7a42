// Which workers' pushes a shard drops as routed by a ring the job has left
// (actors/shard/moves.hpp). A move (a fresh shard job at the new ring) drops every push
// an older ring routed: its chunks may have moved, and the workers send again all that
// is unanswered. A takeover (retarget) keeps every chunk it homes where it was, so a
// push an older ring routed here went to the chunk's home then as now: it counts, and
// the reroute tells the workers to send again only what moved (kept_pushes). Counted
// there, a takeover under a CPU hog made every worker send its whole step again
// (bench/failover.sh: 268 pushes for the 116 that had gone to the dead node).

#include <catch2/catch.hpp>

#include "actors/shard/job.hpp"
#include "actors/shard/moves.hpp"

namespace rw_unit_shard_stale_push {

using namespace rw::actors;

chunk_push routed_by(uint32_t ring) {
  chunk_push p{};
  p.ring = ring;
  return p;
}

TEST_CASE("a shard drops pushes of older rings, but after a takeover counts those "
          "routed here by the rings it kept its chunks through",
          "[shard][moves]") {
  detail::shard_job job;
  job.ring_version = 2; // a job created (or moved) at ring 2
  CHECK(detail::stale_push(job, routed_by(1)));
  CHECK_FALSE(detail::stale_push(job, routed_by(2)));
  CHECK_FALSE(detail::stale_push(job, routed_by(0))); // one node: not stamped

  // A takeover to ring 3 (what retarget does): ring 2's pushes came to the homes the
  // chunks still have; ring 1's were dropped before and sent again since.
  job.kept_from = job.ring_version;
  job.ring_version = 3;
  CHECK_FALSE(detail::stale_push(job, routed_by(2)));
  CHECK_FALSE(detail::stale_push(job, routed_by(3)));
  CHECK(detail::stale_push(job, routed_by(1)));
  // Inits and replicas' sums keep the strict rule.
  CHECK(detail::stale_ring(job, routed_by(2)));
}

} // namespace rw_unit_shard_stale_push
