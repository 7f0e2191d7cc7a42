// rw.node_join: a node joins the jobs that run on other nodes, while they train. The
// node takes new jobs again (after a drain); every flat BSP job on two nodes or more
// that it is not in moves to the ring with it (the ring version one up), one job after
// another: the node is granted the job (with its tensors: no worker brings them) and
// becomes live in the move's reshape with the chunks the new ring homes there (and
// their replicas), and the workers, told the new ring by the other nodes' reroute,
// connect to it and send again what is unanswered. Consistent hashing moves only the
// chunks the new node homes or mirrors now.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"

namespace rw::actors::detail {

namespace {

// Job `j`'s layout with node `m` last on its ring, the ring version one up.
job_layout layout_with(const job_entry& j, const member& m) {
  auto next = j.report.layout;
  next.nodes.push_back(m.info.name);
  next.addresses.push_back(m.info.endpoints.front());
  next.racks.push_back(m.info.rack);
  next.ring_version += 1;
  return next;
}

// Why job `j` does not take node `m` ("" if it can).
std::string unjoinable(const job_entry& j, const member& m) {
  if (auto why = unmovable(j); !why.empty())
    return why;
  for (auto& r : j.report.ranks)
    if (r.state != "live")
      return fmt::format("rank {} is {} (every rank must be connected to take a node)",
                         r.rank, r.state);
  if (m.info.endpoints.empty())
    return "the node announced no worker endpoint";
  return {};
}

// Grants job `id` to node `node_id` as joining, then moves the job to its ring with the
// node; a move given up lets the node drop the grant.
void join_job(cluster_ptr self, uint32_t id, uint32_t node_id,
              std::function<void(std::string, bool)> done) {
  auto& st = self->state;
  auto& j = st.jobs.at(id);
  auto& m = st.nodes.at(node_id);
  auto next = layout_with(j, m);
  auto kept = j.node_ids;
  kept.push_back(node_id);
  job_grant grant{id, j.report.spec,      j.token,         next,
                  {}, j.checkpoint_every, j.checkpoint_dir};
  grant.joining = true;
  grant.max_memory = j.report.max_memory;
  auto name = j.report.name;
  auto node = m.info.name;
  ask_each<ok_atom>(
    self, {node_id}, st.settings.node_request_timeout, "took the job's grant",
    [=](auto&, std::vector<std::string>& failures) {
      auto& st = self->state;
      if (st.jobs.count(id) == 0 || st.jobs.at(id).report.state != "running")
        return done(fmt::format("{}: it ended meanwhile", name), false);
      if (!failures.empty())
        return done(fmt::format("{}: {}", name, fmt::join(failures, "; ")), false);
      move_job_to(self, id, next, kept, "onto node " + node,
                  [self, id, node_id, done](std::string line, bool moved) {
                    if (!moved)
                      ask_each<ok_atom>(
                        self, {node_id}, self->state.settings.node_request_timeout,
                        "let the job go", [](auto&, auto&) {}, thaw_atom::value, id);
                    done(std::move(line), moved);
                  });
    },
    grant_atom::value, grant);
}

} // namespace

caf::result<std::string> join_node(cluster_ptr self, const std::string& name) {
  auto& st = self->state;
  auto* node = live_node(st, name);
  if (node == nullptr)
    return no_live_node(st, "rw.node_join", name);
  bool was_drained = node->drained;
  node->drained = false;
  auto node_id = node->info.id;
  auto run = std::make_shared<moves_run>();
  run->node = name;
  run->rp = self->make_response_promise<std::string>();
  for (auto& [id, j] : st.jobs) {
    if (j.on_node(node_id)
        || (j.report.state != "created" && j.report.state != "running"))
      continue;
    auto why = unjoinable(j, *node);
    if (why.empty())
      run->todo.push_back(id);
    else
      run->stayed.push_back(fmt::format("{}: {}", j.report.name, why));
  }
  run->move_one = [self, node_id](uint32_t id,
                                  std::function<void(std::string, bool)> done) {
    auto& j = self->state.jobs.at(id);
    if (self->state.nodes.count(node_id) == 0) { // it registered again meanwhile
      done(fmt::format("{}: the node registered again during the join; join it again",
                       j.report.name),
           false);
      return true;
    }
    if (j.on_node(node_id) || !unmovable(j).empty())
      return false;
    join_job(self, id, node_id, std::move(done));
    return true;
  };
  run->summary = [name, was_drained](const moves_run& r, int64_t ms) {
    return fmt::format(
      "node {} joined in {} ms: {}moved {} job(s) onto it{}{}; {} job(s) "
      "stayed where they were{}{}",
      name, ms, was_drained ? "it takes new jobs again; " : "", r.moved.size(),
      r.moved.empty() ? "" : ": ", fmt::join(r.moved, "; "), r.stayed.size(),
      r.stayed.empty() ? "" : ": ", fmt::join(r.stayed, "; "));
  };
  spdlog::warn("node join: node {}{}: {} running job(s) move onto it, {} stay", name,
               was_drained ? " takes new jobs again" : "", run->todo.size(),
               run->stayed.size());
  auto rp = run->rp;
  run_moves(self, run);
  return rp;
}

} // namespace rw::actors::detail
