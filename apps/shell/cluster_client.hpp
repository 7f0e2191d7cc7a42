#pragma once
// The shell's connection to the cluster coordinator. Construction resolves the
// coordinator: it asks the node at `connect` (any node's --listen address) where the
// coordinator is (a `locate` frame, bounded by `timeout`), then connects to it over
// CAF's middleman. Every request waits at most `timeout`; a lost connection is
// re-established on the next request. Errors are shell_error with a clear message.

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "apps/shell/cluster_api.hpp"

namespace rw::shell {

class cluster_client final : public cluster_api {
public:
  /// `sys` must have been configured with actors::register_cluster_types.
  /// Throws shell_error when the node or the coordinator cannot be reached.
  /// With a `secret`, this process proves the cluster secret to the coordinator
  /// (a tenant's shell uses tenant_client instead).
  cluster_client(caf::actor_system& sys, std::string connect,
                 std::chrono::milliseconds timeout, std::string secret = {});
  ~cluster_client() override;

  std::vector<actors::node_info> nodes() override;
  std::vector<actors::job_report> jobs() override;
  actors::job_created job_create(const job_spec& spec,
                                 const actors::job_placement& placement) override;
  actors::job_report job_status(const std::string& name) override;
  actors::job_report job_stop(const std::string& name) override;
  uint64_t job_set(const std::string& name, const hyper_change& change) override;
  void job_delete(const std::string& name) override;
  std::string inject(const std::string& name, const std::string& kill,
                     const std::string& node, uint32_t index) override;
  actors::checkpoint_info checkpoint(const std::string& name, const std::string& dir,
                                     uint64_t clock) override;
  std::string node_drain(const std::string& name) override;
  std::string node_join(const std::string& name) override;
  std::string coordinator() const override;

private:
  /// How long a drain or join may take to answer (cluster_client.cpp).
  std::chrono::milliseconds moves_wait();

  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace rw::shell
