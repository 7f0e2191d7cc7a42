// rw.node_drain: a node leaves the jobs it serves while they train. The node takes no
// new jobs; every flat BSP job on it and other nodes moves to the ring without it (the
// ring version one up), one job after another (detail/cluster_move.cpp: fence, reshape,
// reroute). Consistent hashing moves only the chunks the drained node served (with
// replicas: each chunk's copy also goes to its new replica).

#include <algorithm>
#include <chrono>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/detail/cluster_ask.hpp"

namespace rw::actors::detail {

namespace {

using steady_clock = std::chrono::steady_clock;

// Why job `j` cannot move off a node ("" if it can).
std::string unmovable(const job_entry& j) {
  if (j.report.state != "running")
    return j.report.state == "created" ? "no worker has joined it yet" : "it has ended";
  if (j.node_ids.size() < 2)
    return "it lives on this node alone (its workers are connected to no other)";
  if (is_hierarchical(j.report.layout))
    return "it reduces hierarchically (one rack-agg per rack)";
  if (j.report.spec.consistency.model != consistency_spec::bsp)
    return fmt::format("it is {}: only BSP settles at a clock boundary",
                       to_string(j.report.spec.consistency));
  return {};
}

struct drain_run {
  std::string node;
  uint32_t node_id = 0;
  std::vector<uint32_t> todo; // jobs to move, in id order
  std::vector<std::string> moved;
  std::vector<std::string> stayed;
  caf::typed_response_promise<std::string> rp;
  steady_clock::time_point started = steady_clock::now();
};

void next_job(cluster_ptr self, std::shared_ptr<drain_run> run);

void job_done(cluster_ptr self, std::shared_ptr<drain_run> run, std::string line, bool moved) {
  (moved ? run->moved : run->stayed).push_back(std::move(line));
  next_job(self, run);
}

void move_job(cluster_ptr self, std::shared_ptr<drain_run> run, uint32_t id) {
  std::vector<uint32_t> kept;
  auto next = layout_without(self->state.jobs.at(id), run->node_id, kept);
  move_job_to(self, id, next, kept, "off node " + run->node,
              [self, run](std::string line, bool moved) {
                job_done(self, run, std::move(line), moved);
              });
}

void next_job(cluster_ptr self, std::shared_ptr<drain_run> run) {
  auto& st = self->state;
  while (!run->todo.empty()) {
    auto id = run->todo.front();
    run->todo.erase(run->todo.begin());
    auto it = st.jobs.find(id);
    if (it == st.jobs.end() || !it->second.on_node(run->node_id))
      continue;
    if (st.nodes.count(run->node_id) == 0) {
      run->stayed.push_back(fmt::format("{}: node {} left the cluster during the drain",
                                        it->second.report.name, run->node));
      continue;
    }
    move_job(self, run, id);
    return;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now()
                                                                  - run->started)
              .count();
  auto summary = fmt::format("node {} drained in {} ms: it takes no new jobs; moved {} "
                             "job(s){}{}; {} job(s) stayed{}{}",
                             run->node, ms, run->moved.size(), run->moved.empty() ? "" : ": ",
                             fmt::join(run->moved, "; "), run->stayed.size(),
                             run->stayed.empty() ? "" : ": ", fmt::join(run->stayed, "; "));
  spdlog::info("{}", summary);
  run->rp.deliver(summary);
}

} // namespace

caf::result<std::string> drain_node(cluster_ptr self, const std::string& name) {
  auto& st = self->state;
  member* node = nullptr;
  uint32_t node_id = 0;
  std::vector<std::string> names;
  for (auto& [id, m] : st.nodes) {
    names.push_back(m.info.name);
    if (m.info.name == name) {
      node = &m;
      node_id = id;
    }
  }
  if (node == nullptr)
    return cluster_error(errc::invalid_spec,
                         fmt::format("rw.node_drain: no live node is named '{}' (live nodes: "
                                     "{})",
                                     name, fmt::join(names, ", ")));
  node->drained = true;
  auto run = std::make_shared<drain_run>();
  run->node = name;
  run->node_id = node_id;
  run->rp = self->make_response_promise<std::string>();
  for (auto& [id, j] : st.jobs) {
    if (!j.on_node(node_id) || (j.report.state != "created" && j.report.state != "running"))
      continue;
    auto why = unmovable(j);
    if (why.empty())
      run->todo.push_back(id);
    else
      run->stayed.push_back(fmt::format("{}: {}", j.report.name, why));
  }
  spdlog::warn("node drain: node {}: no new jobs go there; {} job(s) to move, {} stay",
               name, run->todo.size(), run->stayed.size());
  auto rp = run->rp;
  next_job(self, run);
  return rp;
}

} // namespace rw::actors::detail
