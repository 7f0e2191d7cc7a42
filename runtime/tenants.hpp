#pragma once
// Tenants: teams that share one cluster, each in its own namespace. The coordinator
// reads them from a TOML file (--tenants-file); a shell that proves a tenant's secret
// at the coordinator's tenant door (protocol/tenant_door.hpp) sees and controls only
// that tenant's jobs, named
// "TENANT:NAME", and creates them within the tenant's quotas. The cluster secret stays
// the operators' and the nodes': it sees and controls everything.
//
// The file: one table per tenant, named by the tenant (lower-case letters, digits, '-'
// and '_', at most 32 characters):
//
//   [vision]
//   secret_file = "tenants/vision.secret" # 16+ characters, chmod 600; relative to this file
//   max_jobs = 4           # live jobs at once
//   max_workers = 64       # workers over its live jobs
//   max_memory_mib = 8192  # node memory over its live jobs (each job reserves its
//                          # `memory` at creation; a job asks for none: refused)
//
// A quota left out is unlimited. Unknown keys, a bad name, a secret shared with
// another tenant or with the cluster, and a secret file others may read are refused.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace rw::runtime {

struct tenant {
  std::string name;
  std::string secret;
  std::optional<uint32_t> max_jobs;
  std::optional<uint32_t> max_workers;
  std::optional<uint64_t> max_memory_bytes;
};

using tenant_registry = std::map<std::string, tenant>;

/// The character that separates a tenant's name from its job's name ("vision:resnet").
constexpr char tenant_separator = ':';

/// Why `name` cannot name a tenant ("" if it can).
std::string tenant_name_error(const std::string& name);

/// The tenant whose namespace job `job` is in ("" for none: an operator's job).
std::string tenant_of(const std::string& job);

/// Reads the tenants file at `path`. Throws std::runtime_error naming the file (and the
/// tenant and key) on anything wrong; `cluster_secret` is the cluster's, which no
/// tenant may hold.
tenant_registry load_tenants(const std::string& path, const std::string& cluster_secret);

} // namespace rw::runtime
