#pragma once
// The cluster coordinator as a node runs it: spawned, published on the node's control
// address over the middleman (where rack-agg nodes' links and shells reach it), and,
// for a --role coordinator node, a locator on its --listen address so that address is
// all anybody needs to know. A rack-agg node that embeds the coordinator answers
// `locate` on its own endpoints instead.

#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/cluster/cluster_coordinator.hpp"
#include "runtime/node_config.hpp"
#include "transports/tcp/address.hpp"

namespace rw::services {
class locator_service;
}

namespace rw::actors {

class coordinator_node {
public:
  /// Spawns and publishes the coordinator (on cfg.control, or on `listen`'s host);
  /// with `with_locator`, also answers locate on `listen` (HOST:PORT, a device name
  /// already resolved to its address). Throws std::runtime_error with a clear message
  /// when it cannot (the control or listen address is busy, the system has no
  /// middleman).
  coordinator_node(caf::actor_system& sys, const runtime::node_config& cfg,
                   const std::string& listen, bool with_locator);
  ~coordinator_node();

  coordinator_node(const coordinator_node&) = delete;
  coordinator_node& operator=(const coordinator_node&) = delete;

  const cluster_coordinator_actor& actor() const noexcept { return coordinator_; }
  /// Where the coordinator takes messages (HOST:PORT).
  const std::string& control_address() const noexcept { return control_; }
  /// The locator's address ("" without one).
  std::string listen_address() const;
  /// The tenant door's address (HOST:PORT; "" without tenants).
  const std::string& tenant_door() const noexcept { return tenant_door_; }

  /// Unpublishes and stops the coordinator. Idempotent.
  void stop();

private:
  /// Opens the tenant door (--tenant-listen, or `control`'s host) and tells `cs` where.
  void open_door(const runtime::node_config& cfg, const transports::tcp::address& control,
                 cluster_settings& cs);

  caf::actor_system& sys_;
  caf::actor door_; // the tenant door (actors/door/tenant_door.hpp); null without tenants
  std::string tenant_door_;
  cluster_coordinator_actor coordinator_;
  std::string control_;
  uint16_t port_ = 0;
  bool tls_ = false; // published through the OpenSSL module
  std::unique_ptr<services::locator_service> locator_;
};

} // namespace rw::actors
