#pragma once
// Reaching the cluster coordinator from another process (a rack-agg node's cluster
// link, a shell): ask any node's --listen endpoint where the coordinator is (locate),
// then connect to it over the middleman. Both steps are bounded by `timeout`, also when
// the far side accepts the connection and then says nothing (a stopped process).

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/cluster_coordinator.hpp"

namespace rw::actors {

struct coordinator_contact {
  cluster_coordinator_actor coordinator; // null on failure
  std::string address;                   // its control address (HOST:PORT)
  std::string error;                     // why it failed, for the user
};

/// Finds and connects to the coordinator through the node at `via` (HOST:PORT), and
/// with a `secret` proves this process holds it (see cluster_coordinator.hpp).
coordinator_contact reach_coordinator(caf::actor_system& sys, const std::string& via,
                                      std::chrono::milliseconds timeout,
                                      const std::string& secret = {});

} // namespace rw::actors
