// rw.node_drain: a node leaves the jobs it serves while they train. The node takes no
// new jobs; every flat BSP job on it and other nodes moves to the ring without it (the
// ring version one up), one job after another (actors/cluster/move.cpp: fence, reshape,
// reroute). Consistent hashing moves only the chunks the drained node served (with
// replicas: each chunk's copy also goes to its new replica).

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"

namespace rw::actors::detail {

caf::result<std::string> drain_node(cluster_ptr self, const std::string& name) {
  auto& st = self->state;
  auto* node = live_node(st, name);
  if (node == nullptr)
    return no_live_node(st, "rw.node_drain", name);
  node->drained = true;
  auto node_id = node->info.id;
  auto run = std::make_shared<moves_run>();
  run->node = name;
  run->rp = self->make_response_promise<std::string>();
  for (auto& [id, j] : st.jobs) {
    if (!j.on_node(node_id)
        || (j.report.state != "created" && j.report.state != "running"))
      continue;
    auto why = unmovable(j);
    if (why.empty())
      run->todo.push_back(id);
    else
      run->stayed.push_back(fmt::format("{}: {}", j.report.name, why));
  }
  run->move_one = [self, node_id, name](uint32_t id,
                                        std::function<void(std::string, bool)> done) {
    auto& j = self->state.jobs.at(id);
    if (!j.on_node(node_id))
      return false;
    std::vector<uint32_t> kept;
    auto next = layout_without(j, node_id, kept);
    move_job_to(self, id, next, kept, "off node " + name, std::move(done));
    return true;
  };
  run->summary = [name](const moves_run& r, int64_t ms) {
    return fmt::format(
      "node {} drained in {} ms: it takes no new jobs; moved {} job(s){}{}; "
      "{} job(s) stayed{}{}",
      name, ms, r.moved.size(), r.moved.empty() ? "" : ": ", fmt::join(r.moved, "; "),
      r.stayed.size(), r.stayed.empty() ? "" : ": ", fmt::join(r.stayed, "; "));
  };
  // A warning when jobs are touched; a node stopping with none (its SIGTERM) is routine.
  spdlog::log(run->todo.empty() && run->stayed.empty() ? spdlog::level::info
                                                       : spdlog::level::warn,
              "node drain: node {}: no new jobs go there; {} job(s) to move, {} stay",
              name, run->todo.size(), run->stayed.size());
  auto rp = run->rp;
  run_moves(self, run);
  return rp;
}

} // namespace rw::actors::detail
