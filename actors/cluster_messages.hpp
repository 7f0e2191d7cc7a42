#pragma once
// The vocabulary of the cluster: what the cluster coordinator, the nodes' cluster
// links and the shell send each other over CAF's network layer (the middleman). Every
// type here is plain data with an `inspect` overload and is registered for remote use
// by register_cluster_types; none holds a local reference.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "rackweave/defaults.hpp"
#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/job_layout.hpp"
#include "runtime/optimizer_fields.hpp"

namespace rw {

// The job spec's types live in the public API, which knows nothing of CAF: their
// inspection is here, in their namespace for argument-dependent lookup.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_spec& x) {
  return f(caf::meta::type_name("rw::optimizer_spec"), x.kind, x.learning_rate,
           x.momentum, x.beta1, x.beta2, x.epsilon, x.weight_decay, x.rescale, x.eta);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, consistency_spec& x) {
  return f(caf::meta::type_name("rw::consistency_spec"), x.model, x.staleness);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compression_spec& x) {
  return f(caf::meta::type_name("rw::compression_spec"), x.kind, x.ratio, x.updates,
           x.warmup);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_spec& x) {
  return f(caf::meta::type_name("rw::tensor_spec"), x.name, x.elements, x.has_init);
}

// Presence bits and values (runtime/optimizer_fields.hpp).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hyper_change& x) {
  float values[runtime::hyper_fields] = {};
  uint8_t present = 0;
  if constexpr (Inspector::reads_state)
    present = runtime::to_bits(x, values);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!runtime::from_bits(x, present, values))
      return caf::make_error(caf::sec::invalid_argument,
                             "hyper_change with unknown fields");
    return caf::none;
  });
  return f(caf::meta::type_name("rw::hyper_change"), x.at_clock, present, values[0],
           values[1], values[2], values[3], values[4], load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_spec& x) {
  return f(caf::meta::type_name("rw::job_spec"), x.name, x.num_workers, x.chunk_bytes,
           x.optimizer, x.tensors, x.consistency, x.schedule, x.compression);
}

// runtime/job_layout.hpp
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_layout& x) {
  return f(caf::meta::type_name("rw::job_layout"), x.nodes, x.addresses, x.racks,
           x.vnodes, x.ring_version, x.reduction, x.rank_racks, x.plan, x.join_timeout_ms,
           x.replicas);
}

} // namespace rw

namespace rw::actors {

using register_atom = caf::atom_constant<caf::atom("register")>;
using hyper_atom = caf::atom_constant<caf::atom("hyper")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using nodes_atom = caf::atom_constant<caf::atom("nodes")>;
using jobs_atom = caf::atom_constant<caf::atom("jobs")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using remove_atom = caf::atom_constant<caf::atom("remove")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using event_atom = caf::atom_constant<caf::atom("event")>;
using locate_atom = caf::atom_constant<caf::atom("locate")>;
using halt_atom = caf::atom_constant<caf::atom("halt")>;
using auth_atom = caf::atom_constant<caf::atom("auth")>;
using probe_atom = caf::atom_constant<caf::atom("probe")>;
using where_atom = caf::atom_constant<caf::atom("where")>;
using bind_atom = caf::atom_constant<caf::atom("bind")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using replicate_atom = caf::atom_constant<caf::atom("replicate")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpnt")>;
using inject_atom = caf::atom_constant<caf::atom("inject")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using node_join_atom = caf::atom_constant<caf::atom("nodejoin")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using fence_atom = caf::atom_constant<caf::atom("fence")>;
using reshape_atom = caf::atom_constant<caf::atom("reshape")>;
using reroute_atom = caf::atom_constant<caf::atom("reroute")>;
using thaw_atom = caf::atom_constant<caf::atom("thaw")>;
using takeover_atom = caf::atom_constant<caf::atom("takeover")>;
using untrust_atom = caf::atom_constant<caf::atom("untrust")>;
/// A request a tenant made through the tenant door (actors/door/tenant_door.hpp).
using tenant_atom = caf::atom_constant<caf::atom("tenant")>;

/// A rack-agg node as the cluster knows it.
struct node_info {
  uint32_t id = 0; // assigned by the coordinator at registration
  std::string name;
  std::string role;                   // "rack-agg"
  std::string rack;                   // its rack (--rack; default: the host name)
  std::vector<std::string> endpoints; // where its workers connect (HOST:PORT each)
  uint32_t shards = 0;
  uint32_t jobs = 0;         // live jobs placed on it
  uint64_t last_seen_ms = 0; // since its last heartbeat, when asked
  double uplink_gbps = 0;    // its rack's links to it (0: not configured)
  double core_gbps = 0;      // its link into the core network (0: not configured)
  double nic_gbps = 0;       // what its first endpoint's device reports (0: nothing)
  std::string nic;           // that device ("" if no single device holds it)
};

/// The coordinator's answer to a node's registration: the node's id, and the jobs the
/// coordinator holds live on it. A node that registers again (the coordinator lost it,
/// or restarted) keeps serving those and fails every other job it holds. Also where
/// tenants' shells reach the coordinator (its tenant door, HOST:PORT; "": none), for the
/// node's `located` answers.
struct node_admission {
  uint32_t node_id = 0;
  std::vector<uint32_t> live_jobs;
  std::string tenant_door;
};

/// The coordinator asks a node to measure the rate from it to another node's data
/// plane (services/rate_probe), within `timeout_ms`.
struct rate_probe_request {
  std::string target;  // the other node's name, for the log
  std::string address; // its first --listen endpoint (HOST:PORT)
  uint32_t max_bytes = defaults::probe_bytes;
  uint32_t burst_ms = defaults::probe_burst_ms;
  uint32_t timeout_ms = defaults::probe_timeout_ms;
};

/// What the probe measured, or why it failed.
struct rate_probe_result {
  bool ok = false;
  double gbps = 0;
  uint64_t bytes = 0;
  uint64_t elapsed_us = 0;
  std::string error;
};

// job_layout, is_hierarchical, top_job_name: runtime/job_layout.hpp.

/// Where a new job may go, as the shell asks: one node by name, several nodes, every
/// node of some racks, or (all empty) the live node with the fewest live jobs; and how
/// it reduces across nodes ("auto", "flat" or "hierarchical").
struct job_placement {
  std::string node;
  std::vector<std::string> nodes;
  std::vector<std::string> racks;
  std::string reduction = "auto";
  /// The rack of each rank (hierarchical: where each worker says hello); empty: ranks
  /// in rack order, in equal contiguous blocks.
  std::vector<std::string> worker_racks;
  /// Without worker_racks, a hierarchical job's ranks are placed as its workers say
  /// hello; all must within this long of the first (0: defaults::join_timeout_ms).
  uint32_t join_timeout_ms = 0;
  /// A checkpoint directory to start the job from ("": a new job at version 0).
  std::string restore;
  /// Periodic checkpoints: every this many clocks (0: none), each into its own
  /// directory under checkpoint_dir (clock-NNNNNNNNNN).
  uint64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  /// Replicas of each chunk (flat BSP jobs on several nodes): 0 or 1; -1: the default
  /// (defaults::replicas).
  int32_t replicas = -1;
  /// The node memory the job may take (parameters, optimizer state, bookkeeping, as a
  /// node counts it for --max-job-mib, for the whole model): a worker whose tensors need
  /// more is refused. 0: the nodes' own limit. A tenant's job must give it: it is what
  /// the job reserves of the tenant's max_memory_mib.
  uint64_t memory = 0;
};

/// A node's part of a checkpoint: the file it wrote, as the manifest lists it.
struct checkpoint_part {
  std::string file;
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
  std::vector<uint32_t> tensors; // with chunks: the (tensor, chunk) ids it holds
  std::vector<uint32_t> chunks;
  uint64_t clock = 0; // the chunks' version (one clock)
};

/// A moving job's chunks on their way to their homes on its new ring (a drain): per
/// node name, a chunk file (runtime/checkpoint/chunk_file.hpp, schemas/checkpoint.capnp)
/// holding each chunk's parameters, optimizer state and version.
struct chunk_move {
  std::string node;
  std::vector<uint8_t> file;
};
struct chunk_moves {
  std::vector<chunk_move> moves;
};

/// A checkpoint written: its directory, clock and files.
struct checkpoint_info {
  std::string job;
  std::string dir;
  uint64_t clock = 0;
  std::vector<std::string> files;
  uint64_t bytes = 0;
};

/// A node places a rank of a job placed at join in its rack (`node`: its index in the
/// job's layout), for `reason`. The coordinator binds each rank once; it answers every
/// binding with the whole map once every rank is bound.
struct rank_binding {
  uint32_t job_id = 0;
  uint32_t rank = 0;
  uint32_t node = 0;
  std::string reason;
};

/// Every rank's rack (node index) of a job placed at join.
struct rank_map {
  uint32_t job_id = 0;
  std::vector<uint32_t> rank_racks;
};

/// Where a job lives and how its workers prove they belong to it. Sent by the
/// coordinator to the job's node; `spec` has the tensors the job was created with (none:
/// the first worker declares them), `secret` is the token's key (hex), never sent to
/// workers.
struct job_grant {
  uint32_t job_id = 0;
  job_spec spec;
  std::string secret;
  job_layout layout;
  std::string restore;           // the checkpoint the job starts from ("": none)
  uint64_t checkpoint_every = 0; // periodic checkpoints (0: none), into checkpoint_dir
  std::string checkpoint_dir;
  /// The node joins the running job (rw.node_join): `spec` has its tensors, and the
  /// job's chunks come in the move's reshape (actors/rack/moves.cpp), not from a first
  /// worker; hellos wait for that.
  bool joining = false;
  /// The job's memory limit on every node (job_placement::memory; 0: the node's own).
  uint64_t max_memory = 0;
};

/// One worker of a job, as its node counts it. Counts are chunk messages.
struct rank_report {
  uint32_t rank = 0;
  std::string
    state; // "absent" (not joined yet), "live", "away" (gone without bye, may rejoin), "left" (said bye)
  std::string peer;   // HOST:PORT it connected from ("" if absent)
  uint64_t clock = 0; // steps pushed: the highest clock any of its pushes carried, + 1
  uint64_t pushes = 0;
  uint64_t pulls = 0;     // pull requests and push_pulls answered
  uint64_t bytes_in = 0;  // gradient bytes received
  uint64_t bytes_out = 0; // parameter bytes sent
  uint64_t wait_us = 0;   // total time its requests waited for an answer on the node
};

/// How late one rank of a BSP job comes, as the job's nodes measure it: per step, how
/// long after the first rank's last chunk of the step its own last chunk arrived (on
/// each shard; the largest over shards and nodes). A rank the job waits for has the
/// largest figures; the others show about 0.
struct rank_lateness {
  uint32_t rank = 0;
  uint64_t last_us = 0;   // the newest step measured
  uint64_t recent_us = 0; // the mean of the last 8 steps measured
  uint64_t max_us = 0;    // the largest since the job began
  uint64_t steps = 0;     // steps measured
  // A step that has waited longer than the node's --slow-step-ms for this rank: how
  // long (0: none), and the chunks of it this rank has not pushed.
  uint64_t waited_ms = 0;
  uint64_t missing_chunks = 0;
};

/// A job as the registry knows it: what was asked for, where it runs, how it is doing.
struct job_report {
  uint32_t id = 0;
  std::string name;
  std::string state;                  // created, running, finished, failed, stopped
  std::string reason;                 // why it failed or stopped ("" otherwise)
  std::string node;                   // the node it was placed on (the first, if several)
  std::vector<std::string> endpoints; // that node's addresses, for the workers
  job_layout layout; // every node of the job, its ring version and reduction
  job_spec spec;     // tensors appear once the first worker has joined
  uint64_t created_unix_ms = 0;
  uint64_t started_unix_ms = 0; // first worker joined (0: not yet)
  uint64_t ended_unix_ms = 0;   // 0: not ended
  std::vector<rank_report> ranks;
  /// Node memory the job may take (job_placement::memory; 0: the nodes' own limit).
  uint64_t max_memory = 0;
  /// By rank (BSP jobs, once steps were measured): how late each comes.
  std::vector<rank_lateness> lateness;
};

/// Adds `one` (a shard's or a node's figures of one rank) into `all` (by rank, in rank
/// order): each figure the largest of the two, the missing chunks (disjoint between
/// shards and nodes) summed.
void merge_lateness(std::vector<rank_lateness>& all, const rank_lateness& one);

/// Whether a job in `state` has ended (finished, failed or stopped): it will not change.
inline bool is_ended(const std::string& state) {
  return state == "finished" || state == "failed" || state == "stopped";
}

/// The answer to a job creation: the job and its token. The token is shown once.
struct job_created {
  job_report job;
  std::string token;
};

/// A node's news about one of its granted jobs: it started, or it ended (with the
/// final per-worker counts).
struct job_event {
  uint32_t job_id = 0;
  std::string state; // running, finished, failed, stopped
  std::string reason;
  job_spec spec; // with the tensors the workers declared
  std::vector<rank_report> ranks;
  std::vector<rank_lateness> lateness; // by rank (BSP)
};

// --- inspection, for CAF's serialization -------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("rw::node_info"), x.id, x.name, x.role, x.rack,
           x.endpoints, x.shards, x.jobs, x.last_seen_ms, x.uplink_gbps, x.core_gbps,
           x.nic_gbps, x.nic);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_admission& x) {
  return f(caf::meta::type_name("rw::node_admission"), x.node_id, x.live_jobs,
           x.tenant_door);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rate_probe_request& x) {
  return f(caf::meta::type_name("rw::rate_probe_request"), x.target, x.address,
           x.max_bytes, x.burst_ms, x.timeout_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rate_probe_result& x) {
  return f(caf::meta::type_name("rw::rate_probe_result"), x.ok, x.gbps, x.bytes,
           x.elapsed_us, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_binding& x) {
  return f(caf::meta::type_name("rw::rank_binding"), x.job_id, x.rank, x.node, x.reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_map& x) {
  return f(caf::meta::type_name("rw::rank_map"), x.job_id, x.rank_racks);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_placement& x) {
  return f(caf::meta::type_name("rw::job_placement"), x.node, x.nodes, x.racks,
           x.reduction, x.worker_racks, x.join_timeout_ms, x.restore, x.checkpoint_every,
           x.checkpoint_dir, x.replicas, x.memory);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_move& x) {
  return f(caf::meta::type_name("rw::chunk_move"), x.node, x.file);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_moves& x) {
  return f(caf::meta::type_name("rw::chunk_moves"), x.moves);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_part& x) {
  return f(caf::meta::type_name("rw::checkpoint_part"), x.file, x.bytes, x.xxh64,
           x.tensors, x.chunks, x.clock);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_info& x) {
  return f(caf::meta::type_name("rw::checkpoint_info"), x.job, x.dir, x.clock, x.files,
           x.bytes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_grant& x) {
  return f(caf::meta::type_name("rw::job_grant"), x.job_id, x.spec, x.secret, x.layout,
           x.restore, x.checkpoint_every, x.checkpoint_dir, x.joining, x.max_memory);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_report& x) {
  return f(caf::meta::type_name("rw::rank_report"), x.rank, x.state, x.peer, x.clock,
           x.pushes, x.pulls, x.bytes_in, x.bytes_out, x.wait_us);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_lateness& x) {
  return f(caf::meta::type_name("rw::rank_lateness"), x.rank, x.last_us, x.recent_us,
           x.max_us, x.steps, x.waited_ms, x.missing_chunks);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_report& x) {
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, x.spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks, x.max_memory, x.lateness);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_created& x) {
  return f(caf::meta::type_name("rw::job_created"), x.job, x.token);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_event& x) {
  return f(caf::meta::type_name("rw::job_event"), x.job_id, x.state, x.reason, x.spec,
           x.ranks, x.lateness);
}

/// Registers every type above (and the lists of them that travel) with `cfg`, and
/// loads the middleman. Both ends of a connection must call it.
void register_cluster_types(caf::actor_system_config& cfg);

/// Errors that cross the network: a category of their own, the message in the context.
/// `code` is an rw::errc.
caf::error cluster_error(errc code, std::string message);
/// The message of an error from cluster_error, or CAF's rendering of any other error.
std::string describe(const caf::actor_system& sys, const caf::error& err);

} // namespace rw::actors
