#pragma once
// What a chunk shard is asked and what it answers, as plain data (no CAF): the
// requests its actor receives (actors/shard/chunk_shard.hpp, "Protocol") and its logic
// (actors/shard/core.hpp) serves. Each carries local references (pooled buffers,
// connections, routing tables) and never crosses the network; actors/messages.hpp
// makes each an allowed message type.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/chunking.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace rw::actors {

// The shard's partners, as interfaces (actors/shard/outbox.hpp).
class shard_peers;
class chunk_relay;
class chunk_mirror;
namespace detail {
struct chunk_handoff; // actors/shard/balance.hpp
} // namespace detail
/// In-node balancing: chunks, state and all, on their way from one shard to another.
using handoff_ptr = std::shared_ptr<detail::chunk_handoff>;

using routing_ptr = std::shared_ptr<const runtime::routing_table>;

/// A received gradient (push) or initial value (init) for one chunk. `payload` is the
/// pooled buffer the poller received it into; the shard holds it until summed.
struct chunk_push {
  uint32_t job_id;
  uint32_t rank;
  uint32_t tensor;
  uint32_t chunk;
  uint64_t clock;
  bool want_result; // push_pull: answer with the updated chunk, not an ack
  runtime::buffer_ref payload;
  transports::connection_ptr conn;
  uint32_t ring = 0; // the ring version the worker routed it by (0: not stamped)
};

/// A request for a chunk at version >= min_version; or, with only_changed, for the
/// chunk if its version is newer than min_version (else an "unchanged" ack).
struct chunk_pull {
  uint32_t job_id;
  uint32_t rank;
  uint32_t tensor;
  uint32_t chunk;
  uint64_t min_version;
  transports::connection_ptr conn;
  bool only_changed = false;
  bool subscribe = false; // every new version from now on (and the current one)
};

/// A worker's `state` frame (protocol/frame.hpp, kind state): read one optimizer array
/// of a chunk, or its version alone; or (rank 0, `load`) load one from `payload`, or
/// set the chunk's version to `clock`.
struct state_request {
  uint32_t job_id;
  uint32_t rank;
  uint32_t tensor;
  uint32_t chunk;
  uint64_t clock; // a load: the clock the state is of
  uint32_t array; // 0: m, 1: v (as the optimizer has them); state_version_only: none
  bool load;
  runtime::buffer_ref payload; // a load of an array: its values (float32)
  transports::connection_ptr conn;
  uint32_t tag = 0; // the frame's `ring` field: the worker's call, echoed in the answer
};

/// Tells a shard to allocate its chunks of a new job. With `params`, the job's
/// parameters live in that shared segment (at transports::shm::plan_params offsets),
/// so colocated workers read them in place; otherwise in the shard's NUMA arena.
struct job_setup {
  uint32_t job_id;
  job_spec spec;
  routing_ptr routes;
  uint32_t shard_index;
  std::shared_ptr<const transports::shm::mapping> params;
  /// Every shard of the node, by index (a layer-wise step's norms and trust ratio).
  std::shared_ptr<const shard_peers> peers;
  /// A rack's part of a hierarchical job: a step sums the rack's workers and hands the
  /// partial to this uplink instead of running the optimizer (null: an ordinary job).
  std::shared_ptr<chunk_relay> relay;
  /// The rank whose init sets version 0 (a hierarchical job's top level: the rack of
  /// the job's rank 0).
  uint32_t init_rank = 0;
  /// A job restored from a checkpoint: the state of this shard's chunks (every one of
  /// them, at the checkpoint's clock); empty: chunks start at version 0.
  std::vector<runtime::checkpoint::chunk_record> restore;
  /// Periodic checkpoints: every chunk is copied right after its step to each multiple
  /// of this clock (0: never), and the shard's copies go to the coordinator.
  uint64_t checkpoint_every = 0;
  /// The job's ring version (several nodes): a push or init routed by an older ring is
  /// dropped unanswered, and sent again by the new one.
  uint64_t ring_version = 0;
  /// A flat job on several nodes: the node's link to its chunks' replicas (a replicated
  /// chunk's step runs once its replica has the step's sum; actors/links/mirror_link).
  std::shared_ptr<chunk_mirror> mirror = nullptr;
};

/// A shard's chunks of a job at a checkpoint's clock (shared: it is not copied again
/// on its way to the file writer).
struct chunk_snapshot {
  std::shared_ptr<std::vector<runtime::checkpoint::chunk_record>> chunks;
};

/// Moving a layer-wise job (LAMB, LARS): per tensor, the version every chunk of it
/// settles at, the highest any of them reaches over the node's shards
/// (chunk_state::settle_reach). Empty for other jobs: their chunks settle one by one.
struct settle_targets {
  std::map<uint32_t, uint64_t> by_tensor;
};

/// A chunk's new parameters from its home (hierarchical jobs): version `version` of
/// chunk (tensor, chunk) of the rack job `job_id`, `data` valid until the shard has
/// installed it (the uplink receives nothing more for that chunk before then).
struct relay_update {
  uint32_t job_id;
  uint32_t tensor;
  uint32_t chunk;
  uint64_t version;
  const float* data; // null: the step cannot complete (code, why)
  errc code = errc::ok;
  std::string why;
  std::shared_ptr<const std::vector<float>> keep; // what `data` points into, if owned
};

/// In-node balancing (actors/shard/balance.hpp): the chunks of one job a busy
/// shard offers to give another, heaviest first (empty: nothing it can give), with the
/// load they gave it since its last plan and the load of all its chunks then.
struct balance_plan {
  uint32_t job_id = 0;
  std::vector<std::array<uint32_t, 2>> chunks; // (tensor, chunk)
  uint64_t load = 0;
  uint64_t shard_load = 0;
  std::string why_none; // when `chunks` is empty: why
};

/// A job's chunks moving between two shards of the node: the node's routes for the
/// job once they have (routes->shard_of names the new shard of each moved chunk).
struct shard_move {
  uint32_t job_id = 0;
  routing_ptr next;
  uint32_t from = 0;
  uint32_t to = 0;
};

/// Per-shard counters and placement, for logs and tests.
struct shard_stats {
  uint64_t chunks = 0;
  uint64_t pushes = 0;
  uint64_t updates = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t duplicates = 0;   // pushes already counted (a worker's re-send), dropped
  int cpu = -1;              // where the shard's thread ran when asked
  std::vector<int> affinity; // the CPUs it may run on
  int memory_numa = -1;      // NUMA domain of its newest job's chunk memory (-1: none)
  uint64_t busy_ns = 0;      // CPU time its thread has used (all the work it did)
  uint64_t moved_in = 0;     // chunks other shards of the node gave it (balancing)
  uint64_t moved_out = 0;    // chunks it gave them
  uint64_t queued = 0;       // pushes waiting in its backlog (priority order)
};

/// What a shard counted for one rank of one job (job status). Counts are chunk
/// messages; `clock` is the highest clock the rank pushed, plus one.
struct rank_counters {
  uint64_t clock = 0;
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t wait_ns = 0; // time its answered requests waited on the shard
  // BSP: how long after the first rank's its last chunk of a step arrived
  // (logic/step_lateness): the newest step, the mean of the last 8, the largest, and
  // how many steps were measured.
  uint64_t late_last_ns = 0;
  uint64_t late_recent_ns = 0;
  uint64_t late_max_ns = 0;
  uint64_t late_steps = 0;
  // A step that has waited longer than the slow-step threshold (--slow-step-ms) for
  // this rank: how long the oldest such step has waited, and the chunks here it has
  // not pushed (0, 0: none waits for it that long).
  uint64_t waited_ns = 0;
  uint64_t missing_chunks = 0;
};
using job_counters = std::vector<rank_counters>;

/// A job's routes changed on the node (a drain moved chunks): each poller binds the
/// job's connections to `routes` (null: as they are) and sends each a `reroute` frame
/// carrying `payload` (protocol::reroute_msg); with `close`, the job has left the
/// node, and the connections are closed after it.
struct route_change {
  uint32_t job_id = 0;
  routing_ptr routes;
  std::vector<std::byte> payload;
  bool close = false;
  uint64_t ring_version = 0; // the ring of `routes`
};

} // namespace rw::actors
