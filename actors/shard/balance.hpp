#pragma once
// In-node balancing, a shard's side: some chunks of a job move from a busy shard to a
// less busy one of the same node and NUMA domain while the job runs, state and all.
// Pure logic on the shards' books; the shard actors send what comes out.
//
// The node's coordinator (actors/rack/balance.cpp) sees which shard is persistently
// busier, asks it which chunks it would give (plan_shed: by the load each chunk gave
// it since its last plan), and moves them in three steps, each answered before the
// next:
//   1. expect, at the shard they go to: it takes the job's new routes; the moved
//      chunks' places wait for their state, and requests for them are stashed.
//   2. every poller of the node takes the new routes: from its answer on, it sends the
//      chunks' requests to the new shard (into the stash).
//   3. migrate, at the shard they leave: it takes the new routes and hands the new
//      shard (adopt) each moved chunk's whole state, and the pushes for them waiting in
//      its backlog; the new shard serves those, then the stash, in order.
// A chunk's state is its parameters and optimizer arrays (their memory stays where it
// is, in the old shard's arena on the same NUMA domain, which the new shard keeps
// alive), version, and the step in progress (gradients held, the partial sum in rank
// order, waiters, subscribers). A request for a moved chunk reaches the old shard
// before step 2 (a poller answers after its sends) and so before migrate, or the new
// shard after step 1: none is lost or served twice, and the sum keeps its rank order,
// so BSP stays bitwise what the job gets unmoved. Only the node's routes change: each
// chunk keeps the endpoint it travels on, and workers notice nothing.
//
// Which jobs move (cannot_balance): flat jobs, not layer-wise (LAMB, LARS: a tensor's
// norms meet at its chunk 0's shard), without replicas (a replica's sums are routed by
// the home's shards) and not being moved between nodes or checkpointed on demand. A
// periodic checkpoint goes on across a move: a chunk is copied on whichever shard it
// reaches the clock, and each shard sends its copies once every chunk it holds is past
// the clock (shard_checkpoint: checkpoint_reached).

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/shard/job.hpp"

namespace rw::actors::detail {

/// Per counted push, what a chunk adds to its load besides its elements: the fixed work
/// of a message (frame, lookup, answer), in elements' worth.
constexpr uint64_t push_load_overhead = 512;

/// Chunks of one job on their way from one shard to another (step 3).
struct chunk_handoff {
  uint32_t job_id = 0;
  routing_ptr next;
  struct moved {
    uint32_t tensor;
    uint32_t chunk;
    chunk_state state;
  };
  std::vector<moved> chunks;
  std::vector<chunk_push> backlog; // the old shard's waiting pushes for them, in order
  std::vector<std::shared_ptr<runtime::numa_region>> arenas; // what their memory is in
};

/// Why `job`'s chunks cannot move between shards now ("" if they can).
std::string cannot_balance(const shard_job& job);

/// What shard `index` would give away: chunks of the movable job that loaded it most
/// since its last plan, heaviest first, together at most `share` (0..1) of the load of
/// all its chunks since then. Starts the next plan's count.
balance_plan plan_shed(shard_book& book, uint32_t index, double share);

/// Step 1, at shard `index`: `job` takes `next`, which gives this shard chunks and
/// takes none away; their places wait (job.incoming). "" or why not (nothing changed).
std::string expect_chunks(shard_job& job, uint32_t index, routing_ptr next);

/// Step 3, at shard `index`: the chunks `next` moves away, taken out of `job` (which
/// takes `next`) with the backlog's pushes for them.
chunk_handoff give_chunks(shard_book& book, uint32_t job_id, shard_job& job,
                          uint32_t index, routing_ptr next);

/// At the new shard: the chunks take their places. Returns the requests to serve now,
/// in order: the old shard's backlog, then the stash. "" in `error`, or why not.
std::vector<shard_job::stashed> take_chunks(shard_job& job, chunk_handoff& h,
                                            std::string& error);

} // namespace rw::actors::detail
