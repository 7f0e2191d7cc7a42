#pragma once
// A rack-agg node inside one actor system: its chunk shards (one per serving core),
// its rack coordinator and its NIC poller over a TCP endpoint. Constructing it binds
// the listen address first, so a bad or busy address fails here, before any actor runs.

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/chunk_shard.hpp"
#include "actors/nic_poller.hpp"
#include "actors/rack_coordinator.hpp"
#include "runtime/node_config.hpp"

namespace rw::actors {

class rack_agg_node {
public:
  /// Throws std::runtime_error (address in use, bad config) with a clear message.
  rack_agg_node(caf::actor_system& sys, const runtime::node_config& cfg);
  ~rack_agg_node();

  rack_agg_node(const rack_agg_node&) = delete;
  rack_agg_node& operator=(const rack_agg_node&) = delete;

  /// The bound address (the real port when the config asked for port 0).
  const std::string& address() const noexcept {
    return address_;
  }
  const std::vector<chunk_shard_actor>& shards() const noexcept {
    return shards_;
  }

  /// Closes the endpoint and stops every actor of the node. Idempotent.
  void stop();

private:
  caf::actor_system& sys_;
  std::string address_;
  std::vector<chunk_shard_actor> shards_;
  rack_coordinator_actor coordinator_;
  nic_poller_actor poller_;
  bool stopped_ = false;
};

} // namespace rw::actors
