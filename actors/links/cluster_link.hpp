#pragma once
// Cluster link: a rack-agg node's membership in the cluster. It finds the cluster
// coordinator (in this process, or through any node's --listen address and the
// middleman), registers the node, sends heartbeats, registers again after the
// coordinator lost it, and carries the coordinator's requests to the node's rack
// coordinator and the rack coordinator's job news back.
//
// Protocol
//   link  -> coordinator   (register_atom, node_info) -> node_admission; then every
//                          heartbeat (heartbeat_atom, id) -> ok_atom; an error or a
//                          down message (the connection closed) means: register again.
//                          After a rejoin, the link has the rack coordinator fail every
//                          job but the admission's live jobs (halt_atom, keep, reason):
//                          the coordinator failed them, or (restarted without a state
//                          database) forgot them
//   coordinator -> link    (grant_atom, job_grant) -> ok_atom
//                          (status_atom, job id) -> job_event
//                          (halt_atom, job id, reason) -> ok_atom
//                          each passed on to the rack coordinator and its answer back;
//                          (probe_atom, rate_probe_request) -> rate_probe_result
//                          run by a rate prober of its own (actors/links/rate_prober), so the
//                          link keeps its heartbeats while the probe blocks;
//                          refused (unauthorized) from anyone but the coordinator
//   rack coordinator -> link (event_atom, job_event)  forwarded as
//                          (event_atom, node id, job_event)
//   rack coordinator -> link (checkpoint_atom, job id, clock, checkpoint_part)
//                          this node's file of a periodic checkpoint, forwarded as
//                          (checkpoint_atom, node id, job id, clock, checkpoint_part)
//   rack coordinator -> link (where_atom, name) -> job_layout
//                          (bind_atom, rank_binding) -> rank_map
//                          asked of the coordinator, its answer back (unavailable while
//                          the node is not registered)
//   link  -> rack coordinator (locate_atom, address, tenant door)  once registered
//   node  -> link          (leave_atom) -> ok_atom    the node is stopping: the link
//                          says so to the coordinator (leave_atom, id) and exits
//   node  -> link          (metrics_atom) -> whether the node is registered now (/readyz)
//   link  -> itself        (tick_atom) every heartbeat interval

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/cluster/cluster_coordinator.hpp"
#include "actors/rack/rack_coordinator.hpp"

namespace rw::actors {

using cluster_link_actor = node_link_actor::extend<
  caf::reacts_to<event_atom, job_event>,
  caf::reacts_to<checkpoint_atom, uint32_t, uint64_t, checkpoint_part>,
  caf::replies_to<where_atom, std::string>::with<job_layout>,
  caf::replies_to<bind_atom, rank_binding>::with<rank_map>,
  caf::replies_to<hyper_atom, std::string, hyper_change>::with<uint64_t>,
  caf::replies_to<leave_atom>::with<ok_atom>,
  caf::replies_to<drain_atom>::with<std::string>,
  caf::replies_to<metrics_atom>::with<bool>, caf::reacts_to<tick_atom>>;

struct link_settings {
  node_info node; // name, role, endpoints, shards
  /// The coordinator in this process (embedded), or null to find it through `via`.
  cluster_coordinator_actor embedded;
  /// The embedded coordinator's control address (what `locate` answers).
  std::string embedded_address;
  /// Any node's --listen address (HOST:PORT), to locate a remote coordinator.
  std::string via;
  /// The cluster secret to prove to a remote coordinator ("" if it wants none).
  std::string secret;
  std::chrono::milliseconds heartbeat{defaults::heartbeat_ms};
  std::chrono::milliseconds request_timeout{defaults::node_request_timeout_ms};
};

/// Spawns the link as a detached actor (asking a node where a remote coordinator is
/// blocks on I/O, bounded by request_timeout). It starts registering at once.
cluster_link_actor spawn_cluster_link(caf::actor_system& sys, link_settings settings,
                                      rack_coordinator_actor rack);

} // namespace rw::actors
