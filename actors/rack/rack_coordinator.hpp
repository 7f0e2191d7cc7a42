#pragma once
// Rack coordinator: the node's job registry and routing. It admits workers (hello,
// proof of the job's token), creates jobs on the shards, and ends them when their
// workers leave or fail, or an operator stops them.
//
// Protocol
//   link   -> coordinator  (grant_atom, job_grant) -> ok_atom
//                          the cluster placed a job here: workers who prove its token
//                          may join it
//   poller -> coordinator  (hello_atom, hello_request) -> job_binding
//                          for a granted job: refused if the hello's spec differs from
//                          the grant's or the worker has no token; else a binding with
//                          a challenge (a fresh nonce) the poller sends the worker.
//                          For an unknown name: refused, unless the node has open jobs,
//                          where the first hello creates the job (no token needed).
//   poller -> coordinator  (proof_atom, proof_request) -> job_binding
//                          the worker's proof: a wrong one is refused and logged; a
//                          right one joins. The first worker of a job creates it: the
//                          coordinator asks every shard to allocate its chunks
//                          (create_atom) and answers once all have; later workers must
//                          match the spec and take a free rank. A refused hello gets a
//                          binding with an error code and message (sent to the worker as
//                          an error frame).
//   poller -> coordinator  (attach_atom, attach_request) -> job_binding
//                          a joined worker's connection to a further endpoint, proved by
//                          the token its welcome carried
//   poller -> coordinator  (leave_atom, job_id, rank, graceful, reason)
//                          one of a rank's connections closed; the rank has left when
//                          its last connection has. Graceful (bye first): the shards
//                          fail only steps that still need the rank; when every rank of
//                          the job has said bye the job finishes (drop_atom). Not
//                          graceful: the rank is away; its steps wait for a worker that
//                          joins again with its rank (a restarted process) for up to
//                          the rejoin timeout, then the job is aborted (abort_atom to
//                          every shard) and every waiting worker gets the reason. Any
//                          rank away or gone with bye may join again while the job
//                          lives: its welcome says which clock it goes on from (the
//                          shards' resume_atom), and pushes it repeats are dropped.
//   coordinator -> itself  (rejoin_atom, job_id, rank, departure)
//                          the rank's rejoin window closed (departure: which absence)
//   shard  -> coordinator  (abort_atom, job_id, errc, reason)
//                          a step timed out: the job is aborted as above.
//   supervisor -> coordinator (replace_atom, index, shard)
//                          shard `index` failed and was restarted with its state:
//                          later messages go to the new handle; the shard itself
//                          reports the jobs whose state may be lost (abort_atom).
//   link   -> coordinator  (status_atom, job_id) -> job_event
//                          a granted job's state and per-rank counts (from the shards)
//   link   -> coordinator  (halt_atom, job_id, reason) -> ok_atom
//                          an operator stopped the job: its workers get errc::stopped
//   link   -> coordinator  (abort_atom, job_id, reason) -> ok_atom
//                          the job failed on another of its nodes: it fails here too,
//                          its workers get errc::unavailable with the reason
//   link   -> coordinator  (halt_atom, keep, reason)
//                          the node registered again: every granted job here but those
//                          in `keep` (the live jobs the cluster coordinator holds on this
//                          node) fails, with reason; a hierarchical job's top level goes
//                          with its job
//   link   -> coordinator  (hyper_atom, job_id, id, hyper_change) -> highest version
//                          prepares a hyper-parameter change on every shard (their steps
//                          of clocks >= at_clock wait); (hyper_atom, job_id, id, apply)
//                          -> ok_atom commits or drops it (actors/rack/hyper.cpp)
//   poller -> coordinator  (hyper_atom, job_id, hyper_change) -> the clock reached
//                          rank 0's worker asks (frame `hyper`): a job of the cluster
//                          goes to the cluster coordinator (rw.job_set, over every node
//                          of the job); an open job is prepared and committed here
//   link   -> coordinator  (register_atom, cluster_gateway)
//                          report granted jobs' starts and ends there (event_atom); ask
//                          there where a job lives (where_atom) and bind ranks (bind_atom)
//   Placement (hierarchical jobs; actors/rack/placement.cpp): a hello for a job placed at
//                          join is placed by the rules of actors/cluster/rack_choice.hpp; a
//                          worker placed in another rack is answered moved with that
//                          agg's address; one placed here proves its token, then the
//                          coordinator binds its rank (bind_atom, held until every rank
//                          is bound) before the rack part starts with the whole map. A
//                          hello for a job the node does not hold is answered moved with
//                          the job's node for the worker (where_atom), or with all of
//                          them when the rules cannot tell (the worker measures).
//   link   -> coordinator  (checkpoint_atom, job_id, clock, dir) -> checkpoint_part
//                          this node's part of a checkpoint (actors/rack/checkpoint.cpp):
//                          every shard copies its chunks of the job at `clock`
//                          (UINT64_MAX: as they stand, a finished job), then a detached
//                          writer writes dir/chunks-NODE.rwck durably and the answer
//                          is its size, xxh64 and chunk ids. A job granted with a
//                          checkpoint to restore starts, at its first worker, with the
//                          state of the chunks homed here read from the checkpoint's
//                          files (a worker whose tensors differ from it is refused).
//   shard  -> coordinator  (ckpt_atom, job_id, clock, chunk_snapshot)
//                          a job granted with checkpoint_every N: a shard's chunks at
//                          clock (a multiple of N); once every shard holding chunks of
//                          the job has sent them, the node writes its file into
//                          checkpoint_dir/clock-NNNNNNNNNN and tells the cluster
//                          (checkpoint_atom, job_id, clock, checkpoint_part to its link)
//   link   -> coordinator  (inject_atom, job_id, kill, index) -> description
//                          fault injection: kill "shard" crashes shard `index` (it
//                          throws between two messages; its supervisor restarts it
//                          with its state). Refused if the job has no chunks here.
//   link   -> coordinator  (fence_atom, job_id, next layout) -> chunk_moves
//                          (reshape_atom, job_id, next layout, chunk_moves) -> ok_atom
//                          (reroute_atom, job_id, next layout) -> ok_atom
//                          (thaw_atom, job_id) -> ok_atom
//                          a flat BSP job moves to a new ring (a node drained;
//                          actors/rack/moves.cpp): its chunks here settle and freeze,
//                          those homed elsewhere on the new ring are the answer; then the
//                          node rebuilds its part from the chunks it kept and those moved
//                          to it; then its workers get a `reroute` frame (a node the new
//                          ring leaves out lets the job go). Thaw: the move was given up
//   link   -> coordinator  (takeover_atom, job_id, next layout) -> ok_atom
//                          a node of a job with replicas died: the job goes on by the
//                          ring without it (next); every shard keeps the chunks it
//                          served, replicas of the dead node's chunks become their
//                          homes; then reroute as for a move (actors/rack/moves.cpp)
//   shard  -> coordinator  (step_atom, job_id, shard index, clock)
//                          the job's chunks on that shard completed `clock` steps; once
//                          every shard holding its chunks has, the job's clock on the
//                          node moves on, and the time since the last move is a step
//                          time (actors/rack/steps.cpp)
//   node   -> coordinator  (metrics_atom) -> node_gauges
//                          every live job (ranks live and away, clock, step times) and
//                          the shards as they are now (a restarted one's new handle)
//   node   -> coordinator  (pollers_atom, pollers)  every NIC poller of the node
//   link   -> coordinator  (locate_atom, address, door)   where the cluster coordinator
//                          is, and its tenant door ("": none)
//   poller -> coordinator  (locate_atom) -> (address, door)  (empty: not known yet)
//   coordinator -> itself  (balance_atom)  every balance_interval: in-node balancing
//                          (actors/rack/balance.cpp) compares the shards' busy time;
//                          a shard persistently busier than the least busy one of its
//                          NUMA domain gives it chunks (actors/shard/balance.hpp).
//                          Fence, reshape, reroute, thaw, takeover and checkpoint
//                          requests that come while chunks move are served once they
//                          have

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "actors/cluster_messages.hpp"
#include "actors/messages.hpp"
#include "runtime/checkpoint/root.hpp"
#include "runtime/thread_cpu.hpp"

namespace rw::actors {

/// The node's cluster link, as the rack coordinator uses it: where it reports granted
/// jobs' starts and ends, and asks the cluster coordinator where a job lives and to
/// bind a rank of a job placed at join (see cluster_coordinator.hpp).
using cluster_gateway = caf::typed_actor<
  caf::reacts_to<event_atom, job_event>,
  caf::replies_to<where_atom, std::string>::with<job_layout>,
  caf::replies_to<bind_atom, rank_binding>::with<rank_map>,
  caf::reacts_to<checkpoint_atom, uint32_t, uint64_t, checkpoint_part>,
  caf::replies_to<hyper_atom, std::string, hyper_change>::with<uint64_t>>;

/// What /metrics asks of the rack coordinator: its live jobs, and its shards' current
/// handles (a supervisor may have restarted one since the node started).
struct node_gauges {
  std::vector<job_gauge> jobs;
  std::vector<chunk_shard_actor> shards;
};

/// Job ids from here up belong to open jobs (made by a worker's hello on a node with
/// --open-jobs); ids below are the cluster coordinator's.
constexpr uint32_t open_job_ids = 1u << 31;

using rack_coordinator_actor = caf::typed_actor<
  caf::replies_to<hello_atom, hello_request>::with<job_binding>,
  caf::replies_to<proof_atom, proof_request>::with<job_binding>,
  caf::replies_to<grant_atom, job_grant>::with<ok_atom>,
  caf::replies_to<status_atom, uint32_t>::with<job_event>,
  caf::replies_to<halt_atom, uint32_t, std::string>::with<ok_atom>,
  caf::replies_to<abort_atom, uint32_t, std::string>::with<ok_atom>,
  caf::reacts_to<halt_atom, std::vector<uint32_t>, std::string>,
  caf::replies_to<checkpoint_atom, uint32_t, uint64_t,
                  std::string>::with<checkpoint_part>,
  caf::reacts_to<ckpt_atom, uint32_t, uint64_t, chunk_snapshot>,
  caf::reacts_to<register_atom, cluster_gateway>,
  caf::reacts_to<locate_atom, std::string, std::string>,
  caf::replies_to<locate_atom>::with<std::string, std::string>,
  caf::replies_to<attach_atom, attach_request>::with<job_binding>,
  caf::reacts_to<leave_atom, uint32_t, uint32_t, bool, std::string>,
  caf::reacts_to<rejoin_atom, uint32_t, uint32_t, uint32_t>,
  caf::reacts_to<abort_atom, uint32_t, errc, std::string>,
  caf::reacts_to<replace_atom, uint32_t, chunk_shard_actor>,
  caf::replies_to<inject_atom, uint32_t, std::string, uint32_t>::with<std::string>,
  caf::replies_to<fence_atom, uint32_t, job_layout>::with<chunk_moves>,
  caf::replies_to<reshape_atom, uint32_t, job_layout, chunk_moves>::with<ok_atom>,
  caf::replies_to<reroute_atom, uint32_t, job_layout>::with<ok_atom>,
  caf::replies_to<thaw_atom, uint32_t>::with<ok_atom>,
  caf::replies_to<takeover_atom, uint32_t, job_layout>::with<ok_atom>,
  caf::replies_to<hyper_atom, uint32_t, uint64_t, hyper_change>::with<uint64_t>,
  caf::replies_to<hyper_atom, uint32_t, uint64_t, bool>::with<ok_atom>,
  caf::replies_to<hyper_atom, uint32_t, hyper_change>::with<uint64_t>,
  caf::reacts_to<pollers_atom, std::vector<caf::actor>>, caf::reacts_to<balance_atom>,
  caf::reacts_to<step_atom, uint32_t, uint32_t, uint64_t>,
  caf::replies_to<metrics_atom>::with<node_gauges>>;

struct coordinator_settings {
  std::string node_name;
  uint32_t max_chunk_bytes = defaults::max_chunk_bytes;
  uint32_t max_workers = defaults::max_workers;
  uint64_t max_job_bytes = 0; // parameters + optimizer state of one job
  /// Endpoints serving each shard (runtime::placement); empty: one endpoint.
  std::vector<std::vector<uint32_t>> shard_endpoints;
  /// Keep each job's parameters in a shared segment colocated workers can read.
  bool shared_params = false;
  /// A worker's hello may create a job nobody granted, without a token.
  bool open_jobs = false;
  /// Live open jobs the workers of one host (IP address) may have created (0: any).
  uint32_t max_open_jobs_per_peer = defaults::max_open_jobs_per_peer;
  /// What the live open jobs together may take (parameters, state; 0: no bound).
  uint64_t max_open_jobs_bytes = 0;
  /// The shards must have set up a new job's chunks within this long, or it fails.
  std::chrono::milliseconds shard_setup_timeout{defaults::shard_setup_timeout_ms};
  /// A rank whose worker disconnected without bye may join again within this long.
  std::chrono::milliseconds rejoin_timeout{defaults::rejoin_timeout_ms};
  /// In-node balancing (actors/rack/balance.cpp): how often the shards' busy times are
  /// compared (0: never); how much busier (ratio) the busiest shard of a NUMA domain
  /// must be than its least busy one, and in how many comparisons in a row, before
  /// chunks move from it.
  std::chrono::milliseconds balance_interval{0};
  double balance_ratio = defaults::balance_ratio;
  uint32_t balance_windows = defaults::balance_windows;
  /// A job is served by one shard per this many bytes of its parameters on the node
  /// (logic/shard_set.hpp; 0: every job by every shard).
  uint64_t job_bytes_per_shard = 0;
  /// Each shard's CPU clock, by shard index (shard_settings::cpu_clock): what the
  /// balancer samples. Balancing is off without one per shard.
  std::vector<std::shared_ptr<const runtime::thread_cpu_slot>> shard_cpu;
  /// This node writes checkpoints and reads restores under this root only (none
  /// without one), whatever the coordinator asks.
  runtime::checkpoint::checkpoint_root checkpoint_root{};
};

rack_coordinator_actor spawn_rack_coordinator(caf::actor_system& sys,
                                              coordinator_settings settings,
                                              std::vector<chunk_shard_actor> shards);

} // namespace rw::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::node_gauges)
