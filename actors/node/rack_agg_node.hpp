#pragma once
// A rack-agg node inside one actor system: per NUMA domain a supervisor with that
// domain's chunk shards (one per serving core) and NIC pollers (one per endpoint), the
// node's rack coordinator, its cluster link and, unless it joins another node's
// cluster (--coordinator), the embedded cluster coordinator. Constructing it discovers the machine, plans placement
// and binds every listen address first, so a bad config, a missing core, NIC or NUMA
// domain, or a busy address fails here with a clear message, before any worker can
// connect.

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "actors/links/cluster_link.hpp"
#include "actors/node/coordinator_node.hpp"
#include "actors/poller/nic_poller.hpp"
#include "actors/node/numa_supervisor.hpp"
#include "actors/rack/rack_coordinator.hpp"
#include "logic/shard_set.hpp"
#include "runtime/node_config.hpp"
#include "runtime/placement.hpp"

namespace rw::actors {

class rack_agg_node {
public:
  /// Throws std::runtime_error with a clear message when the node cannot start.
  rack_agg_node(caf::actor_system& sys, const runtime::node_config& cfg);
  ~rack_agg_node();

  rack_agg_node(const rack_agg_node&) = delete;
  rack_agg_node& operator=(const rack_agg_node&) = delete;

  /// The first bound address (the real port when the config asked for port 0).
  const std::string& address() const noexcept { return addresses_.front(); }
  /// Every bound address, one per endpoint, in config order.
  const std::vector<std::string>& addresses() const noexcept { return addresses_; }
  /// The shards as started (a supervisor may have replaced one since).
  const std::vector<chunk_shard_actor>& shards() const noexcept { return shards_; }
  const std::vector<nic_poller_actor>& pollers() const noexcept { return pollers_; }
  /// The fabric endpoints' pollers (none without --fabric).
  const std::vector<nic_poller_actor>& fabric_pollers() const noexcept {
    return fabric_pollers_;
  }
  /// The node's rack coordinator (its jobs) and cluster link (its membership).
  const rack_coordinator_actor& rack() const noexcept { return coordinator_; }
  const cluster_link_actor& link() const noexcept { return link_; }
  /// The poller of colocated workers' shared memory (null if disabled).
  const nic_poller_actor& shm_poller() const noexcept { return shm_poller_; }
  /// Drains this node at the cluster coordinator (rw.node_drain): it takes no new jobs
  /// and its flat BSP jobs move off it. Blocks until done; returns what moved and what
  /// stayed, or why it could not (not in a cluster, the coordinator unreachable).
  std::string drain();
  const runtime::placement& plan() const noexcept { return plan_; }
  /// The embedded cluster coordinator (null when the node joined another's cluster).
  const coordinator_node* cluster() const noexcept { return cluster_.get(); }

  /// Closes the endpoints and stops every actor of the node. Idempotent.
  void stop();

private:
  caf::actor_system& sys_;
  std::shared_ptr<const runtime::topology> topo_;
  runtime::placement plan_;
  detail::shard_share_choice job_shares_; // how many shards serve a job (logged)
  std::vector<std::string> addresses_;
  std::vector<numa_supervisor_actor> supervisors_;
  std::vector<chunk_shard_actor> shards_;
  std::vector<nic_poller_actor> pollers_;
  nic_poller_actor shm_poller_;                  // null with shm disabled
  std::vector<nic_poller_actor> fabric_pollers_; // one per fabric endpoint, or none
  rack_coordinator_actor coordinator_;
  std::unique_ptr<coordinator_node> cluster_; // embedded, or null
  cluster_link_actor link_;
  bool stopped_ = false;
};

} // namespace rw::actors
