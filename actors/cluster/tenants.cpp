// Tenants on the coordinator (runtime/tenants.hpp): who is heard (holders of the
// cluster secret over the middleman; tenants only through the tenant door,
// actors/door), what a tenant sees (its namespace), and its quotas at job creation.

#include <algorithm>
#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include "actors/node/caf_peer_sweep.hpp"
#include "actors/cluster/state.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

std::string mib(uint64_t bytes) {
  return fmt::format("{} MiB", (bytes + (1u << 20) - 1) >> 20);
}

// What the live jobs of tenant `t` hold now.
struct usage {
  std::vector<std::string> jobs;
  uint64_t workers = 0;
  uint64_t memory = 0;
};

usage used_by(const cluster_state& st, const std::string& t) {
  usage u;
  for (auto& [id, j] : st.jobs)
    if (!is_ended(j.report.state) && runtime::tenant_of(j.report.name) == t) {
      u.jobs.push_back(j.report.name);
      u.workers += j.report.spec.num_workers;
      // Memory on each of its nodes: a job holds its part on every one of them.
      u.memory += j.report.max_memory * std::max<uint64_t>(1, j.node_ids.size());
    }
  return u;
}

} // namespace

std::string sender_of(cluster_ptr self) {
  auto& sender = self->current_sender();
  if (!sender)
    return "(anonymous)";
  if (sender->node() == self->node())
    return "this process";
  auto where = peer_address(self->system(), sender->node());
  auto id = to_string(sender->node());
  return where.empty() ? "CAF node " + id : where + " (CAF node " + id + ")";
}

void log_refusal(cluster_ptr self, const std::string& what, const std::string& line) {
  auto& sender = self->current_sender();
  auto key = (sender ? to_string(sender->node()) : std::string("anonymous")) + "/" + what;
  auto unlogged = self->state.refusals.admit(key);
  if (!unlogged)
    return; // logged less than a minute ago: counted for the next line
  spdlog::warn(
    "control refused: {}; sender {}{}", line, sender_of(self),
    *unlogged == 0
      ? std::string{}
      : fmt::format(" ({} more refusals of it in the last minute)", *unlogged));
}

bool heard(cluster_ptr self) {
  auto& st = self->state;
  if (st.settings.secret.empty())
    return true;
  auto& sender = self->current_sender();
  if (!sender)
    return false;
  return sender->node() == self->node() || st.trusted.count(sender->node()) != 0;
}

bool from_door(cluster_ptr self, const std::string& key, const std::string& tenant) {
  auto& st = self->state;
  return !st.settings.door_key.empty() && key.size() == st.settings.door_key.size()
         && sodium_memcmp(key.data(), st.settings.door_key.data(), key.size()) == 0
         && st.settings.tenants.count(tenant) != 0;
}

std::string asker(const std::string& tenant, const std::string& where) {
  return fmt::format("{} at {}",
                     tenant.empty() ? "an operator" : "tenant '" + tenant + "'", where);
}

bool visible_to(const std::string& tenant, const std::string& job) {
  return tenant.empty() || runtime::tenant_of(job) == tenant;
}

caf::expected<std::string> job_for(cluster_ptr self, const std::string& tenant,
                                   const std::string& name) {
  auto& st = self->state;
  if (tenant.empty())
    return name;
  auto full = runtime::tenant_of(name).empty() ? tenant + runtime::tenant_separator + name
                                               : name;
  if (runtime::tenant_of(full) == tenant && st.by_name.count(full) != 0)
    return full;
  std::vector<std::string> names;
  for (auto& [id, j] : st.jobs)
    if (visible_to(tenant, j.report.name))
      names.push_back(j.report.name);
  return cluster_error(
    errc::unknown_job,
    names.empty()
      ? fmt::format("no job named '{}' in tenant '{}' (it has no jobs)", name, tenant)
      : fmt::format("no job named '{}' in tenant '{}' (its jobs: {})", name, tenant,
                    fmt::join(names, ", ")));
}

caf::error admit_create(cluster_ptr self, const std::string& tenant, job_spec& spec,
                        const job_placement& placement) {
  auto& st = self->state;
  if (!tenant.empty()) {
    auto own = runtime::tenant_of(spec.name);
    if (!own.empty() && own != tenant)
      return cluster_error(
        errc::unauthorized,
        fmt::format("tenant '{}' creates jobs in its own namespace: name "
                    "it '{}{}NAME' or just NAME, not '{}'",
                    tenant, tenant, runtime::tenant_separator, spec.name));
    if (own.empty())
      spec.name = tenant + runtime::tenant_separator + spec.name;
    // Checkpoint directories are paths on the nodes' file systems.
    if (!placement.restore.empty() || !placement.checkpoint_dir.empty())
      return cluster_error(errc::unauthorized,
                           fmt::format("tenant '{}' cannot name checkpoint directories "
                                       "(restore, checkpoint_dir): they are paths on the "
                                       "nodes, an operator's call",
                                       tenant));
  }
  return quota_refusal(st, spec, placement);
}

caf::error quota_refusal(const cluster_state& st, const job_spec& spec,
                         const job_placement& placement, size_t nodes) {
  if (nodes == 0)
    nodes = std::max<size_t>(1, placement.nodes.size());
  auto t = runtime::tenant_of(spec.name);
  if (t.empty() || st.settings.tenants.empty())
    return caf::none;
  auto it = st.settings.tenants.find(t);
  if (it == st.settings.tenants.end()) {
    std::vector<std::string> known;
    for (auto& [name, x] : st.settings.tenants)
      known.push_back(name);
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}': '{}' separates a tenant's name from its "
                                     "job's, and there is no tenant '{}' (tenants: {})",
                                     spec.name, runtime::tenant_separator, t,
                                     fmt::join(known, ", ")));
  }
  auto& q = it->second;
  auto u = used_by(st, t);
  if (q.max_jobs && u.jobs.size() >= *q.max_jobs)
    return cluster_error(
      errc::too_many_requests,
      fmt::format("tenant '{}' has {} live job(s), its max_jobs: stop or "
                  "delete one of [{}] first",
                  t, u.jobs.size(), fmt::join(u.jobs, ", ")));
  if (q.max_workers && u.workers + spec.num_workers > *q.max_workers)
    return cluster_error(
      errc::too_many_requests,
      fmt::format("job '{}' wants {} workers and tenant '{}' has {} of its "
                  "max_workers {} in live jobs [{}]",
                  spec.name, spec.num_workers, t, u.workers, *q.max_workers,
                  fmt::join(u.jobs, ", ")));
  if (q.max_memory_bytes) {
    auto left = *q.max_memory_bytes > u.memory ? *q.max_memory_bytes - u.memory : 0;
    if (placement.memory == 0)
      return cluster_error(
        errc::invalid_spec,
        fmt::format("a job of tenant '{}' says how much node memory it may "
                    "take: rw.job_create{{..., memory = '512MiB'}} "
                    "(the tenant has {} of its {} left)",
                    t, mib(left), mib(*q.max_memory_bytes)));
    const auto all = placement.memory * nodes;
    if (all > left)
      return cluster_error(
        errc::too_many_requests,
        fmt::format("job '{}' asks for {} of memory{} and tenant '{}' has "
                    "{} of its max_memory_mib {} left (live jobs: [{}])",
                    spec.name, mib(placement.memory),
                    nodes > 1 ? fmt::format(" on each of its {} nodes ({} "
                                            "in all)",
                                            nodes, mib(all))
                              : std::string{},
                    t, mib(left), mib(*q.max_memory_bytes), fmt::join(u.jobs, ", ")));
  }
  return caf::none;
}

} // namespace rw::actors::detail
