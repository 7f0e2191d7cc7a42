// What a shell asks about jobs: an operator's (tenant "": every job) over the
// middleman, or a tenant's through the tenant door (only its own jobs, by the name it
// gives them). `where` is who asked, for the log.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

caf::result<std::vector<job_report>> shell_jobs(cluster_ptr self,
                                                const std::string& tenant) {
  std::vector<job_report> out;
  for (auto& [id, j] : self->state.jobs)
    if (visible_to(tenant, j.report.name))
      out.push_back(j.report);
  return when_recorded(self, std::move(out));
}

caf::result<job_created> shell_create(cluster_ptr self, const std::string& tenant,
                                      const std::string& where, job_spec& spec,
                                      const job_placement& placement) {
  if (auto err = admit_create(self, tenant, spec, placement)) {
    spdlog::warn("job not created: job='{}' asked by {}: {}", spec.name,
                 asker(tenant, where), describe(self->system(), err));
    return err;
  }
  return create_job(self, spec, placement, asker(tenant, where));
}

caf::result<job_report> shell_status(cluster_ptr self, const std::string& tenant,
                                     const std::string& name) {
  auto job = job_for(self, tenant, name);
  if (!job)
    return std::move(job.error());
  return job_status(self, *job);
}

caf::result<uint64_t> shell_set(cluster_ptr self, const std::string& tenant,
                                const std::string& name, const hyper_change& change) {
  auto job = job_for(self, tenant, name);
  if (!job)
    return std::move(job.error());
  return set_hyper(self, *job, change);
}

caf::result<job_report> shell_stop(cluster_ptr self, const std::string& tenant,
                                   const std::string& where, const std::string& name) {
  auto job = job_for(self, tenant, name);
  if (!job)
    return std::move(job.error());
  spdlog::info("job stop asked: job='{}' by {}", *job, asker(tenant, where));
  return stop_job(self, *job);
}

caf::result<ok_atom> shell_remove(cluster_ptr self, const std::string& tenant,
                                  const std::string& where, const std::string& name) {
  auto job = job_for(self, tenant, name);
  if (!job)
    return std::move(job.error());
  spdlog::info("job delete asked: job='{}' by {}", *job, asker(tenant, where));
  return remove_job(self, *job);
}

} // namespace rw::actors::detail
