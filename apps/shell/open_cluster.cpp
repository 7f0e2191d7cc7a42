#include "apps/shell/open_cluster.hpp"

#include "apps/shell/cluster_client.hpp"
#include "apps/shell/tenant_client.hpp"

namespace rw::shell {

std::unique_ptr<cluster_api> open_cluster(caf::actor_system& sys,
                                          const std::string& connect,
                                          std::chrono::milliseconds timeout,
                                          const std::string& secret,
                                          const std::string& tenant) {
  if (!tenant.empty())
    return std::make_unique<tenant_client>(connect, timeout, tenant, secret);
  return std::make_unique<cluster_client>(sys, connect, timeout, secret);
}

} // namespace rw::shell
