// Fault injection for tests and demos (rw.inject): the coordinator finds the job's node
// and asks it to inject the fault into the job's part there.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

caf::result<std::string> inject_fault(cluster_ptr self, const std::string& name,
                                      const std::string& kill, const std::string& node,
                                      uint32_t index) {
  auto& st = self->state;
  if (kill != "shard" && kill != "link")
    return cluster_error(
      errc::invalid_spec,
      fmt::format("rw.inject: kill = '{}' is not injected here; kill = "
                  "'shard' crashes a shard, kill = 'link' closes a "
                  "worker's connections (a worker, a node or the "
                  "coordinator is a process: kill -9 it)",
                  kill));
  auto by = st.by_name.find(name);
  if (by == st.by_name.end())
    return cluster_error(errc::unknown_job,
                         fmt::format("rw.inject: no job named '{}'", name));
  auto& job = st.jobs.at(by->second);
  if (!job.report.state.empty() && job.report.state != "created"
      && job.report.state != "running")
    return cluster_error(
      errc::unknown_job,
      fmt::format("rw.inject: job '{}' has ended ({})", name, job.report.state));
  const member* target = nullptr;
  std::vector<std::string> names;
  for (auto id : job.node_ids) {
    auto m = st.nodes.find(id);
    if (m == st.nodes.end())
      continue;
    names.push_back(m->second.info.name);
    if (target == nullptr && (node.empty() || m->second.info.name == node))
      target = &m->second;
  }
  if (target == nullptr)
    return cluster_error(
      errc::invalid_spec,
      fmt::format("rw.inject: job '{}' has no live node named '{}' (its "
                  "nodes: {})",
                  name, node, fmt::join(names, ", ")));
  spdlog::warn("fault injection: job '{}': kill {} {} on node {}", name, kill, index,
               target->info.name);
  auto rp = self->make_response_promise<std::string>();
  self
    ->request(target->link, st.settings.node_request_timeout, inject_atom::value,
              by->second, kill, index)
    .then([rp](std::string& done) mutable { rp.deliver(std::move(done)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

} // namespace rw::actors::detail
