#pragma once
// The vocabulary the node's actors speak: atoms and message types. Every type here
// carries local references (pooled buffers, connections, routing tables) and never
// crosses the network, so each is an allowed unsafe message type.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/actor.hpp>
#include <caf/atom.hpp>

#include "actors/cluster_messages.hpp"
#include "protocol/control.hpp"
#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/chunking.hpp"
#include "runtime/step_histogram.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace rw::actors {

class rack_uplink;
class mirror_link;

using push_atom = caf::atom_constant<caf::atom("push")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using create_atom = caf::atom_constant<caf::atom("create")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using ok_atom = caf::atom_constant<caf::atom("ok")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using replace_atom = caf::atom_constant<caf::atom("replace")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using shm_atom = caf::atom_constant<caf::atom("shm")>;
using fabric_atom = caf::atom_constant<caf::atom("fabric")>;
using norm_atom = caf::atom_constant<caf::atom("norm")>;
using trust_atom = caf::atom_constant<caf::atom("trust")>;
using work_atom = caf::atom_constant<caf::atom("work")>;
using proof_atom = caf::atom_constant<caf::atom("proof")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using ckpt_atom = caf::atom_constant<caf::atom("ckpt")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using crash_atom = caf::atom_constant<caf::atom("crash")>;
using resend_atom = caf::atom_constant<caf::atom("resend")>;
using cut_atom = caf::atom_constant<caf::atom("cut")>;
using pollers_atom = caf::atom_constant<caf::atom("pollers")>;
using mirror_atom = caf::atom_constant<caf::atom("mirror")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using plan_atom = caf::atom_constant<caf::atom("plan")>;
using expect_atom = caf::atom_constant<caf::atom("expect")>;
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;
using balance_atom = caf::atom_constant<caf::atom("balance")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;

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

/// Tells a shard to allocate its chunks of a new job. With `params`, the job's
/// parameters live in that shared segment (at transports::shm::plan_params offsets),
/// so colocated workers read them in place; otherwise in the shard's NUMA arena.
struct job_setup {
  uint32_t job_id;
  job_spec spec;
  routing_ptr routes;
  uint32_t shard_index;
  std::shared_ptr<const transports::shm::mapping> params;
  std::vector<caf::actor> peers; // every shard of the node, by index (layer-wise norms)
  /// A rack's part of a hierarchical job: a step sums the rack's workers and hands the
  /// partial to this uplink instead of running the optimizer (null: an ordinary job).
  std::shared_ptr<rack_uplink> relay;
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
  std::shared_ptr<mirror_link> mirror = nullptr;
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

/// A worker's hello, as the poller forwards it to the rack coordinator.
struct hello_request {
  protocol::hello_msg hello;
  std::string peer;
};

/// A worker's answer to the node's challenge, with the hello it answers for.
struct proof_request {
  hello_request hello;
  std::vector<std::byte> nonce; // the challenge the poller sent
  std::vector<std::byte> mac;   // the worker's proof (runtime/credentials)
};

/// A worker's attach to a further endpoint of the node, as (job, rank, token).
struct attach_request {
  uint32_t job_id;
  uint32_t rank;
  std::vector<std::byte> nonce; // the worker's AttachProof
  std::vector<std::byte> mac;
  std::string peer;
};

/// The coordinator's answer to a hello: a binding of the connection to (job, rank), or
/// an error to send back.
struct job_binding {
  errc code = errc::ok;
  std::string message;
  std::vector<std::string> candidates; // errc::moved: where to say hello instead
  uint32_t job_id = 0;
  bool created = false;
  routing_ptr routes;
  uint64_t token = 0; // for attaching to the node's other endpoints
  uint32_t chunk_bytes = 0;
  std::string params_segment; // the job's shared parameters ("" if none)
  /// Non-empty: not admitted yet; send the worker this nonce and await its proof.
  std::vector<std::byte> challenge;
  /// The job's nodes (more than one: a multi-node job) and which of them this is.
  job_layout layout;
  uint32_t node_index = 0;
  uint32_t shard_rank = 0; // the worker's rank as the shards count it (in its rack)
  /// The clock this rank goes on from: its first push some chunk here has not counted
  /// (0 for a new job; a restored job's checkpoint clock; a restarted worker's step).
  uint64_t resume_clock = 0;
  /// The job's spec as the node serves it, for the welcome (null: none is sent).
  std::shared_ptr<const job_spec> spec;
  /// How the worker's pushes travel (a mirror link's: none, float32 sums).
  compression_spec compression;
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

/// Per-poller placement and buffers, for logs and tests.
struct poller_stats {
  int cpu = -1;
  std::vector<int> affinity;
  uint64_t buffers = 0; // receive buffers allocated so far
  int buffer_numa = -1; // NUMA domain of its receive buffers (-1: none yet)
  uint64_t connections = 0;
  std::string endpoint;   // where peers reach it (transports::endpoint::describe)
  uint64_t frames_in = 0; // frames read (headers decoded) since the node started
  uint64_t bytes_in = 0;  // their headers and payloads
  uint64_t refused = 0;   // frames answered with an error frame, or that closed a stream
};

/// One job as the node's rack coordinator sees it, for /metrics (rw-node --metrics).
struct job_gauge {
  uint32_t id = 0;
  std::string name;
  uint32_t ranks = 0; // the job's workers (this rack's, for a hierarchical job)
  uint32_t live = 0;  // of them, connected now
  uint32_t away = 0;  // gone without bye, inside their rejoin window
  uint64_t clock = 0; // steps every chunk of the job here has completed
  runtime::step_histogram steps; // time between successive clocks
};

} // namespace rw::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::transports::connection_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<rw::transports::endpoint>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::chunk_push)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<rw::actors::chunk_push>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::chunk_pull)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::job_setup)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::relay_update)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::chunk_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::settle_targets)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::hello_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::attach_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::proof_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::job_binding)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::shard_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::balance_plan)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::shard_move)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::poller_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::job_counters)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::route_change)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::errc)
