#pragma once
// The vocabulary the node's actors speak: atoms and message types (the chunk shard's
// own, plain data, in actors/shard/requests.hpp). Every type here carries local
// references (pooled buffers, connections, routing tables) and never crosses the
// network, so each is an allowed unsafe message type.

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
#include "actors/shard/requests.hpp"
#include "protocol/control.hpp"
#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/chunking.hpp"
#include "runtime/step_histogram.hpp"
#include "transports/shm/handover.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace rw::actors {

using push_atom = caf::atom_constant<caf::atom("push")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using create_atom = caf::atom_constant<caf::atom("create")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using held_atom = caf::atom_constant<caf::atom("held")>; // a shard's held answers are due
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
using state_atom = caf::atom_constant<caf::atom("state")>;

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

/// A shard's figures of how late `rank` comes (its counters), as a job report carries
/// them; merge_lateness adds them up over shards and nodes.
inline rank_lateness lateness_of(const rank_counters& c, uint32_t rank) {
  return {
    rank,         c.late_last_ns / 1000,   c.late_recent_ns / 1000, c.late_max_ns / 1000,
    c.late_steps, c.waited_ns / 1'000'000, c.missing_chunks};
}

/// One job as the node's rack coordinator sees it, for /metrics (rw-node --metrics).
struct job_gauge {
  uint32_t id = 0;
  std::string name;
  uint32_t ranks = 0; // the job's workers (this rack's, for a hierarchical job)
  uint32_t live = 0;  // of them, connected now
  uint32_t away = 0;  // gone without bye, inside their rejoin window
  uint64_t clock = 0; // steps every chunk of the job here has completed
  runtime::step_histogram steps; // time between successive clocks
  // A hierarchical job's: the job rank of each of this rack's ranks, by its index in
  // the rack, as the shards count them (empty: a flat job, the same).
  std::vector<uint32_t> global_rank;
};

} // namespace rw::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::transports::connection_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<rw::transports::endpoint>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<rw::transports::shm::handover>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::chunk_push)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<rw::actors::chunk_push>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::chunk_pull)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::state_request)
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
