// Placing a hierarchical job's ranks as their workers join (a job created without
// worker_racks): the node that admits a worker binds its rank to its rack here, the
// one authority. The first binding of a rank wins; binding it to another rack is
// refused. Every binding is answered with the whole rank -> rack map once every rank
// is bound, so each node sets up its rack part knowing its ranks; a rank that has not
// joined within the job's join timeout fails the job, naming the missing ranks.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

namespace {

constexpr uint32_t unbound = UINT32_MAX;

// "0:a 1:b ..." over the ranks bound so far.
std::string describe_map(const job_entry& j) {
  std::vector<std::string> parts;
  auto& racks = j.report.layout.racks;
  for (uint32_t r = 0; r < j.bound.size(); ++r)
    if (j.bound[r] != unbound)
      parts.push_back(fmt::format("{}:{}", r, racks.at(j.bound[r])));
  return parts.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(parts, " "));
}

// Every rank is bound: every rack must have a worker; then every waiting node learns
// the map.
void complete(cluster_ptr self, job_entry& j) {
  auto& l = j.report.layout;
  std::vector<std::string> empty;
  for (uint32_t k = 0; k < l.nodes.size(); ++k)
    if (std::find(j.bound.begin(), j.bound.end(), k) == j.bound.end())
      empty.push_back(l.racks[k]);
  if (!empty.empty()) {
    fail_job(
      self, j.report.id,
      fmt::format("rack(s) {} got none of job '{}''s workers (rank:rack {}): every "
                  "rack of a hierarchical job needs one; give workers the rack "
                  "option, or have each say hello to its own rack's node",
                  fmt::join(empty, ", "), j.report.name, describe_map(j)));
    return;
  }
  l.rank_racks = j.bound;
  save_job(self, j.report.id);
  spdlog::info(
    "job placed at join: job='{}' id={}: every rank has its rack (rank:rack {})",
    j.report.name, j.report.id, describe_map(j));
  auto waiting = std::move(j.waiting);
  j.waiting.clear();
  for (auto& rp : waiting)
    rp.deliver(rank_map{j.report.id, l.rank_racks});
}

} // namespace

caf::result<job_layout> where_job(cluster_ptr self, const std::string& name) {
  auto n = self->state.by_name.find(name);
  if (n == self->state.by_name.end())
    return cluster_error(errc::unknown_job, fmt::format("no job named '{}'", name));
  auto& j = self->state.jobs.at(n->second);
  if (is_ended(j.report.state))
    return cluster_error(errc::unknown_job,
                         fmt::format("job '{}' has ended ({})", name, j.report.state));
  return j.report.layout;
}

caf::result<rank_map> bind_rank(cluster_ptr self, const rank_binding& b) {
  auto it = self->state.jobs.find(b.job_id);
  if (it == self->state.jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("no job {}", b.job_id));
  auto& j = it->second;
  auto& l = j.report.layout;
  if (is_ended(j.report.state))
    return cluster_error(errc::unknown_job,
                         fmt::format("job '{}' has ended ({}{}{})", j.report.name,
                                     j.report.state, j.report.reason.empty() ? "" : ": ",
                                     j.report.reason));
  if (l.join_timeout_ms == 0 || b.rank >= j.report.spec.num_workers
      || b.node >= l.nodes.size())
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}' does not place rank {} in node {} at join",
                                     j.report.name, b.rank, b.node));
  if (j.bound.empty()) {
    j.bound.assign(j.report.spec.num_workers, unbound);
    j.bound_why.assign(j.report.spec.num_workers, std::string{});
    self->delayed_send(self, std::chrono::milliseconds(l.join_timeout_ms),
                       expire_atom::value, b.job_id);
  }
  auto& at = j.bound[b.rank];
  if (at != unbound && at != b.node) {
    auto why = fmt::format(
      "rank {} of job '{}' is in rack {} ({}); node {} would place it in "
      "rack {} ({}): a rank belongs to one rack",
      b.rank, j.report.name, l.racks[at], j.bound_why[b.rank], l.nodes[b.node],
      l.racks[b.node], b.reason);
    spdlog::warn("rank binding refused: {}", why);
    return cluster_error(errc::rank_taken, why);
  }
  if (at == unbound) {
    at = b.node;
    j.bound_why[b.rank] = b.reason;
    spdlog::info("rank bound: job='{}' id={} rank={} rack={} node={}: {}", j.report.name,
                 b.job_id, b.rank, l.racks[b.node], l.nodes[b.node], b.reason);
  }
  if (!l.rank_racks.empty())
    return rank_map{b.job_id, l.rank_racks};
  auto rp = self->make_response_promise<rank_map>();
  j.waiting.push_back(rp);
  if (std::find(j.bound.begin(), j.bound.end(), unbound) == j.bound.end())
    complete(self, j);
  return rp;
}

void bindings_expired(cluster_ptr self, uint32_t id) {
  auto it = self->state.jobs.find(id);
  if (it == self->state.jobs.end() || is_ended(it->second.report.state))
    return;
  auto& j = it->second;
  if (!j.report.layout.rank_racks.empty())
    return;
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < j.bound.size(); ++r)
    if (j.bound[r] == unbound)
      missing.push_back(r);
  fail_job(self, id,
           fmt::format("rank(s) {} of job '{}' did not join within {} ms of the first "
                       "(placed so far, rank:rack {}); a hierarchical job placed at join "
                       "starts once every rank has said hello",
                       fmt::join(missing, ", "), j.report.name,
                       j.report.layout.join_timeout_ms, describe_map(j)));
}

void release_bindings(job_entry& j, const std::string& why) {
  auto waiting = std::move(j.waiting);
  j.waiting.clear();
  for (auto& rp : waiting)
    rp.deliver(cluster_error(errc::unavailable, why));
}

} // namespace rw::actors::detail
