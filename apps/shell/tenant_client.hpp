#pragma once
// A tenant's connection to the cluster: through the coordinator's tenant door
// (protocol/tenant_door.hpp, actors/door/requests.hpp), never over CAF's middleman.
// Construction asks the node at `connect` where the door is (a `locate` frame), opens
// a session (both sides prove the tenant's secret; every frame after is sealed) and
// keeps it; a session the door closed (idle, restarted) is opened again before the next
// request. Every request waits at most `timeout`. Operators' calls (checkpoint,
// inject, drain, join) are refused here, saying so: the door would refuse them too.

#include <chrono>
#include <memory>
#include <string>

#include "apps/shell/cluster_api.hpp"

namespace rw::shell {

class tenant_client final : public cluster_api {
public:
  /// Throws shell_error when the node or the door cannot be reached (unavailable,
  /// timeout) or the door refuses the tenant or its secret (unauthorized).
  tenant_client(std::string connect, std::chrono::milliseconds timeout,
                std::string tenant, std::string secret);
  ~tenant_client() override;

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
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace rw::shell
