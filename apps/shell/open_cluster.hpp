#pragma once
// The cluster as this process may see it: an operator's (or a cluster without a secret)
// over CAF's middleman (cluster_client), or a tenant's through the coordinator's
// tenant door (tenant_client).

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "apps/shell/cluster_api.hpp"

namespace rw::shell {

/// With a `tenant`, a session at the tenant door proving `secret` (the tenant's);
/// without one, the coordinator over the middleman, proving `secret` (the cluster's)
/// when given. Throws shell_error as the clients do.
std::unique_ptr<cluster_api> open_cluster(caf::actor_system& sys,
                                          const std::string& connect,
                                          std::chrono::milliseconds timeout,
                                          const std::string& secret,
                                          const std::string& tenant);

} // namespace rw::shell
