#pragma once
// Reaching the cluster coordinator from another process (a rack-agg node's cluster
// link, a shell): ask any node's --listen endpoint where the coordinator is (locate),
// then connect to it over the middleman. Both steps are bounded by `timeout`, also when
// the far side accepts the connection and then says nothing (a stopped process).

#include <chrono>
#include <set>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/cluster/cluster_coordinator.hpp"

namespace rw::actors {

struct coordinator_contact {
  cluster_coordinator_actor coordinator; // null on failure
  std::string address;                   // its control address (HOST:PORT)
  std::string error;                     // why it failed, for the user
  errc code = errc::unavailable; // unauthorized: reached, but the secret was refused
};

// The steps, for callers that cannot block (an actor that chains requests instead):

/// Asks the node at `via` where the coordinator is (blocks up to `timeout`). Sets
/// `address`, or `error`.
coordinator_contact locate_coordinator(const std::string& via,
                                       std::chrono::milliseconds timeout);

/// Takes the middleman's answer to (connect_atom, host, port) for `out.address`: sets
/// `coordinator`, or `error` (nothing published there, or not a coordinator).
void accept_connect(caf::actor_system& sys, coordinator_contact& out,
                    caf::strong_actor_ptr ptr, const std::set<std::string>& ifs);

/// What this process answers to the coordinator's (auth_atom) nonce.
std::string cluster_proof(const std::string& secret, const std::string& nonce);

/// All of it, blocking (each step bounded by `timeout`): finds and connects to the
/// coordinator through the node at `via` (HOST:PORT), and with a `secret` proves this
/// process holds the cluster secret (see cluster_coordinator.hpp). Tenants do not come
/// this way: they speak to the tenant door (apps/shell/tenant_client.hpp).
coordinator_contact reach_coordinator(caf::actor_system& sys, const std::string& via,
                                      std::chrono::milliseconds timeout,
                                      const std::string& secret = {});

} // namespace rw::actors
