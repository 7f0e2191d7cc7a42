#pragma once
// Cluster coordinator: membership, the job registry and job credentials. One per
// cluster; embedded in the first rack-agg node unless one runs with --role coordinator.
// Published on the node's control address; nodes and shells reach it over the
// middleman (they find that address by asking any node's --listen endpoint, `locate`).
//
// Protocol (every request is answered within a bounded time, or with an error whose
// message says what went wrong; errors are cluster_error(errc, message))
//   peer  -> coordinator  (auth_atom) -> nonce;  (auth_atom, proof) -> ok_atom
//                         with a cluster secret, a process (a CAF node) proves it holds
//                         it before anything else it sends is taken: HMAC-SHA-256 keyed
//                         by the secret over the nonce (runtime/credentials). Requests
//                         from processes that have not are refused (unauthorized).
//                         Without a secret every peer is trusted. With one, the
//                         control port speaks TLS with certificates derived from it
//                         (actors/node/control_tls.hpp), so nobody else reaches BASP.
//   door  -> coordinator  (tenant_atom, key, tenant, peer, <a shell request below>)
//                         a tenant's request, from the tenant door in this process
//                         (actors/door/tenant_door.hpp): the door saw `tenant` prove
//                         its secret (--tenants-file, runtime/tenants.hpp) on the
//                         connection from `peer`. `key` is the door's proof: a random
//                         secret the node gave both at start (cluster_settings::
//                         door_key), never sent over the network, so no BASP peer can
//                         send this, whatever source it names. Only nodes, jobs, create, status,
//                         set (hyper), stop and delete, answered as to a shell, for
//                         that tenant's jobs only, named "TENANT:NAME" (it may leave out
//                         "TENANT:"); it creates jobs there within the tenant's quotas
//                         (too_many_requests beyond) and names no checkpoint directory.
//                         Tenants never speak BASP: a sender must be heard (this
//                         process, or one that proved the cluster secret).
//   link  -> coordinator  (register_atom, node_info) -> node_admission
//                         a rack-agg node joins (or rejoins after a lost connection):
//                         its id and the live jobs the coordinator holds on it (the
//                         node fails any other job it holds). The coordinator monitors
//                         the sender: when its connection drops, or its heartbeats stop
//                         for node_timeout, the node is gone and every live job placed
//                         on it fails - but a flat job with a complete periodic
//                         checkpoint starts again from it on its nodes left (a new id,
//                         the same name and token; actors/cluster/recover.cpp).
//                         A coordinator started from a state database (--state-db)
//                         comes back with its jobs; it keeps each node's place in them
//                         by name: a node that registers under a name a restored job
//                         lives on takes that place, and the coordinator asks it about
//                         each such job (status_atom): one the node still serves goes on
//                         as the node says; one the node no longer holds (it restarted
//                         too) is granted again if no worker had joined, else it fails.
//                         A node that does not come back within node_timeout of the
//                         restart is gone: its jobs fail, as for a node that vanished.
//                         Every job transition is written to the database (on the
//                         writer's thread, actors/cluster/store_writer.hpp) before the
//                         shell is answered (actors/cluster/store.hpp).
//   link  -> coordinator  (heartbeat_atom, node id) -> ok_atom
//                         an error (unknown_job) means the coordinator has forgotten
//                         the node (it timed out): the link registers again
//   link  -> coordinator  (leave_atom, node id)       a node stops cleanly
//   link  -> coordinator  (event_atom, node id, job_event)
//                         a granted job started (first worker) or ended on the node
//   shell -> coordinator  (get_atom, nodes_atom) -> vector<node_info>   live nodes
//   shell -> coordinator  (get_atom, jobs_atom)  -> vector<job_report>  every job
//   shell -> coordinator  (create_atom, job_spec, placement) -> job_created
//                         validates the spec (no tensors: workers declare them), picks
//                         the node (placement: a node name, or "" for the live node
//                         with the fewest live jobs), for `auto` over several racks
//                         probes the core links it lacks rates for (probe_atom), grants
//                         the job to it (grant_atom) and answers with the job and its
//                         token
//   shell -> coordinator  (status_atom, name) -> job_report
//                         a running job's per-worker counts come from its node, live
//   shell -> coordinator  (hyper_atom, name, hyper_change) -> highest clock reached
//                         changes the job's hyper-parameters from at_clock on: prepared on
//                         every node of the job (their steps of clocks >= at_clock wait),
//                         then committed everywhere if no chunk had run the step of
//                         at_clock, else dropped everywhere (clock_out_of_range)
//   shell -> coordinator  (stop_atom, name) -> job_report
//                         ends a job: its node aborts it (workers get errc::stopped)
//   shell -> coordinator  (remove_atom, name) -> ok_atom
//                         forgets an ended job (stopping it first if it is live), so
//                         its name can be used again
//   link  -> coordinator  (where_atom, name) -> job_layout
//                         where a live job lives: a node that got a hello for a job it
//                         does not hold sends the worker on (unknown_job if none)
//   link  -> coordinator  (bind_atom, rank_binding) -> rank_map
//                         a hierarchical job placed at join: the node admitting a
//                         worker binds its rank to the node's rack (first binding wins;
//                         another rack for a bound rank: rank_taken). Answered once
//                         every rank is bound, with the whole map; if the job's join
//                         timeout runs out first, the job fails naming the missing ranks
//   shell -> coordinator  (checkpoint_atom, name, dir, clock) -> checkpoint_info
//                         a checkpoint of a BSP job (actors/cluster/checkpoint.cpp):
//                         running, at `clock` (0: the first clock ahead of every rank's)
//                         or finished, as it ended. Every node of the job writes its
//                         chunks at that clock in parallel (checkpoint_atom to its
//                         link); once all have, the manifest is written; a node that
//                         fails or leaves fails the checkpoint, and no manifest is
//                         written. Created with restore = dir, a job's nodes start
//                         its chunks from that checkpoint
//   shell -> coordinator  (inject_atom, name, kill, node, index) -> description
//                         fault injection, for tests and demos
//                         (actors/cluster/inject.cpp): kill "shard" crashes shard
//                         `index` of node `node` ("": the job's first node) while the
//                         job runs there (inject_atom, job id, kill, index to the node)
//   link  -> coordinator  (checkpoint_atom, node id, job id, clock, checkpoint_part)
//                         a job created with checkpoint_every = N: a node wrote its file
//                         of clock c (a multiple of N; its shards copied each chunk
//                         right after its step to c); once every node of the job has,
//                         the coordinator writes the manifest of checkpoint_dir/clock-c
//   shell -> coordinator  (drain_atom, node name) -> description
//                         drains a node (actors/cluster/drain.cpp): it takes no new
//                         jobs, and every flat BSP job on it and other nodes moves, while
//                         it trains, to the ring without it: fence (every node of the
//                         job settles its chunks at a clock boundary; the ones the new
//                         ring homes elsewhere come back as chunk files), reshape (each
//                         node left rebuilds its part from what it kept and what moved to
//                         it), reroute (workers hear the new ring and send again what is
//                         unanswered). Only the chunks whose home changed move. A job
//                         that cannot move (on this node alone, hierarchical, SSP or
//                         async, not started) stays, and the answer says so
//   shell -> coordinator  (node_join_atom, node name) -> description
//                         a node joins the running jobs (actors/cluster/join.cpp): it
//                         takes new jobs again (after a drain), and every flat BSP job
//                         on two nodes or more that it is not in moves, while it trains,
//                         to the ring with it (the same three phases; the node is granted
//                         the job first and its workers connect to it on the reroute).
//                         Only the chunks the new node homes (and their replicas) move
//   coordinator -> itself (expire_atom, job id)  a job's join timeout ran out
//   coordinator -> itself (replicate_atom, job id, ring version, attempt)  a job taken
//                         over on that ring gets its replicas back (actors/cluster/takeover)
//   coordinator -> itself (tick_atom)  every node_timeout / 4: forget silent nodes
//   coordinator -> itself (create_atom)  a node registered: the creations that found no
//                         node to place on while nodes were awaited after a restart
//                         (create_job) are tried again, after the node's admission
//                         answer (a grant before it, the node would fail)
//   coordinator -> itself (untrust_atom, vector<node_id>, vector<int64_t>)  the
//                         middleman connection each process that proved the cluster
//                         secret is on now (-1: none; actors/node/caf_peer_sweep), looked at
//                         right after its proof and on every tick: trust ends when the
//                         connection it proved on does
//   coordinator -> link   (grant_atom, job_grant) -> ok_atom
//                         (status_atom, job id) -> job_event
//                         (halt_atom, job id, reason) -> ok_atom   an operator's stop
//                         (checkpoint_atom, job id, clock, dir) -> checkpoint_part
//                         (abort_atom, job id, reason) -> ok_atom  the job failed on
//                         another of its nodes (or one left): it fails here too
//                         (fence_atom | reshape_atom | reroute_atom | thaw_atom, job
//                         id, ...) moving a job (a drain; rack_coordinator.hpp)
//                         (probe_atom, rate_probe_request) -> rate_probe_result
//                         creating an `auto` job over racks where some node has no
//                         configured core rate: each such node measures the rate to its
//                         successor on the job's ring (actors/cluster/probes.cpp); the
//                         results are kept per node pair for defaults::probe_cache_ms

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/cluster_messages.hpp"
#include "rackweave/defaults.hpp"
#include "actors/messages.hpp"
#include "runtime/checkpoint/root.hpp"
#include "runtime/tenants.hpp"

namespace rw::actors {

using cluster_coordinator_actor = caf::typed_actor<
  caf::replies_to<auth_atom>::with<std::string>,
  caf::replies_to<auth_atom, std::string>::with<ok_atom>,
  caf::replies_to<register_atom, node_info>::with<node_admission>,
  caf::replies_to<heartbeat_atom, uint32_t>::with<ok_atom>,
  caf::reacts_to<leave_atom, uint32_t>, caf::reacts_to<event_atom, uint32_t, job_event>,
  caf::replies_to<caf::get_atom, nodes_atom>::with<std::vector<node_info>>,
  caf::replies_to<caf::get_atom, jobs_atom>::with<std::vector<job_report>>,
  caf::replies_to<create_atom, job_spec, job_placement>::with<job_created>,
  caf::replies_to<status_atom, std::string>::with<job_report>,
  caf::replies_to<stop_atom, std::string>::with<job_report>,
  caf::replies_to<hyper_atom, std::string, hyper_change>::with<uint64_t>,
  caf::replies_to<remove_atom, std::string>::with<ok_atom>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, caf::get_atom,
                  nodes_atom>::with<std::vector<node_info>>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, caf::get_atom,
                  jobs_atom>::with<std::vector<job_report>>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, create_atom,
                  job_spec, job_placement>::with<job_created>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, status_atom,
                  std::string>::with<job_report>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, stop_atom,
                  std::string>::with<job_report>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, hyper_atom,
                  std::string, hyper_change>::with<uint64_t>,
  caf::replies_to<tenant_atom, std::string, std::string, std::string, remove_atom,
                  std::string>::with<ok_atom>,
  caf::replies_to<where_atom, std::string>::with<job_layout>,
  caf::replies_to<bind_atom, rank_binding>::with<rank_map>,
  caf::reacts_to<expire_atom, uint32_t>,
  caf::reacts_to<replicate_atom, uint32_t, uint64_t, uint32_t>,
  caf::replies_to<checkpoint_atom, std::string, std::string,
                  uint64_t>::with<checkpoint_info>,
  caf::reacts_to<checkpoint_atom, uint32_t, uint32_t, uint64_t, checkpoint_part>,
  caf::replies_to<inject_atom, std::string, std::string, std::string,
                  uint32_t>::with<std::string>,
  caf::replies_to<drain_atom, std::string>::with<std::string>,
  caf::replies_to<node_join_atom, std::string>::with<std::string>,
  caf::reacts_to<tick_atom>, caf::reacts_to<create_atom>,
  caf::reacts_to<untrust_atom, std::vector<caf::node_id>, std::vector<int64_t>>>;

/// What the coordinator asks of a node: the node's cluster link answers.
using node_link_actor = caf::typed_actor<
  caf::replies_to<grant_atom, job_grant>::with<ok_atom>,
  caf::replies_to<status_atom, uint32_t>::with<job_event>,
  caf::replies_to<halt_atom, uint32_t, std::string>::with<ok_atom>,
  caf::replies_to<abort_atom, uint32_t, std::string>::with<ok_atom>,
  caf::replies_to<probe_atom, rate_probe_request>::with<rate_probe_result>,
  caf::replies_to<checkpoint_atom, uint32_t, uint64_t,
                  std::string>::with<checkpoint_part>,
  caf::replies_to<inject_atom, uint32_t, std::string, uint32_t>::with<std::string>,
  caf::replies_to<fence_atom, uint32_t, job_layout>::with<chunk_moves>,
  caf::replies_to<reshape_atom, uint32_t, job_layout, chunk_moves>::with<ok_atom>,
  caf::replies_to<reroute_atom, uint32_t, job_layout>::with<ok_atom>,
  caf::replies_to<thaw_atom, uint32_t>::with<ok_atom>,
  caf::replies_to<takeover_atom, uint32_t, job_layout>::with<ok_atom>,
  caf::replies_to<hyper_atom, uint32_t, uint64_t, hyper_change>::with<uint64_t>,
  caf::replies_to<hyper_atom, uint32_t, uint64_t, bool>::with<ok_atom>>;

namespace detail {
class cluster_store;
struct stored_registry;
} // namespace detail

struct cluster_settings {
  /// Peers must prove they hold this before they are heard ("": every peer is).
  std::string secret;
  /// Tenants (runtime/tenants.hpp): a shell that proves one's secret at the tenant door
  /// sees and controls only that tenant's jobs, within its quotas. Needs a secret.
  runtime::tenant_registry tenants;
  /// The tenant door's address (HOST:PORT; "": no door), told to every node that
  /// registers so that its `located` answers name it.
  std::string tenant_door;
  /// What the tenant door's requests carry to prove they are its (random, this
  /// process only; "": no door, and tenant requests are refused).
  std::string door_key;
  uint32_t max_chunk_bytes = defaults::max_chunk_bytes;
  uint32_t max_workers = defaults::max_workers;
  /// Checkpoint and restore paths are taken under this root only (none without one).
  runtime::checkpoint::checkpoint_root checkpoint_root{};
  /// A node whose heartbeats stop for this long is gone.
  std::chrono::milliseconds node_timeout{defaults::node_timeout_ms};
  /// How long the coordinator waits for a node's answer (grant, status, stop).
  std::chrono::milliseconds node_request_timeout{defaults::node_request_timeout_ms};
  /// Where the job registry is kept (null: in memory only, lost with the process) and
  /// what it held when the coordinator started (actors/cluster/store.hpp).
  std::shared_ptr<detail::cluster_store> store;
  std::shared_ptr<const detail::stored_registry> restored;
};

cluster_coordinator_actor spawn_cluster_coordinator(caf::actor_system& sys,
                                                    cluster_settings settings);

} // namespace rw::actors
