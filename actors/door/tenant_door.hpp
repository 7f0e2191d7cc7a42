#pragma once
// The tenant door: where tenants' shells reach the cluster coordinator. A CAF broker on
// its own TCP port (the coordinator's --tenant-listen) speaks the door's protocol
// (protocol/tenant_door.hpp: a mutual proof of the tenant's secret, then sealed
// frames) and hands each request of the ops a tenant may make (actors/door/
// requests.hpp) to the coordinator as (tenant_atom, key, tenant, peer, ...): the tenant is
// the one this process saw proved on that connection, never one a peer names.
// Tenants never speak BASP: the control port takes only holders of the cluster secret.
//
// Bounds before the proof: door_max_strangers connections in all and
// door_max_strangers_per_host per host (more are closed at once), a handshake within
// door_handshake_ms, handshake frames of max_handshake_frame bytes. After it:
// door_max_sessions sessions, requests of max_request_frame bytes, one request at a
// time (a second before the answer closes the session), door_idle_ms without a request.
//
// Protocol of the actor itself (this process only):
//   node -> door  (caf::put_atom, cluster_coordinator_actor)  where requests go (before
//                 it, requests are refused: unavailable)

#include <chrono>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/cluster/cluster_coordinator.hpp"
#include "runtime/tenants.hpp"

namespace rw::actors::door {

struct door_settings {
  std::string host; // "" or a wildcard: every interface
  uint16_t port = 0;
  runtime::tenant_registry tenants;
  /// What each request to the coordinator carries to prove it is the door's
  /// (cluster_settings::door_key).
  std::string key;
  std::chrono::milliseconds handshake_timeout{defaults::door_handshake_ms};
  std::chrono::milliseconds idle_timeout{defaults::door_idle_ms};
  std::chrono::milliseconds request_timeout{defaults::door_request_timeout_ms};
  uint32_t max_strangers = defaults::door_max_strangers;
  uint32_t max_strangers_per_host = defaults::door_max_strangers_per_host;
  uint32_t max_sessions = defaults::door_max_sessions;
};

struct tenant_door {
  caf::actor actor;
  uint16_t port = 0; // the bound port (the one asked for, or a free one for 0)
};

/// Opens the door. Throws std::runtime_error saying why it cannot (the port is taken).
tenant_door open_tenant_door(caf::actor_system& sys, door_settings settings);

} // namespace rw::actors::door
