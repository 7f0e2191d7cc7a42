// rw.node_drain: a node leaves the jobs it serves while they train. The node takes no
// new jobs; every flat BSP job on it and other nodes moves to the ring without it, one
// job after another, in three phases over the job's nodes (the nodes' side:
// detail/rack_moves.cpp):
//   fence    every node settles its chunks of the job at a clock boundary (steps begun
//            finish, none begins) and freezes them; the chunks the new ring homes
//            elsewhere come back, per new home, as chunk files
//   reshape  each node of the new ring rebuilds its part from the chunks it kept and
//            those moved to it
//   reroute  every node tells its workers the new ring; they send again what is
//            unanswered; the drained node lets the job go
// Consistent hashing moves only the chunks the drained node homed. A failed fence gives
// the move up (every node thaws; the job goes on where it was); a failed reshape fails
// the job, as its state is then split. The job's ring version goes one up.

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

// Why job `j` cannot move off node `node` ("" if it can).
std::string unmovable(const cluster_state& st, const job_entry& j) {
  if (j.report.state != "running")
    return j.report.state == "created" ? "no worker has joined it yet" : "it has ended";
  if (j.node_ids.size() < 2)
    return "it lives on this node alone (its workers are connected to no other)";
  if (is_hierarchical(j.report.layout))
    return "it reduces hierarchically (one rack-agg per rack)";
  if (j.report.spec.consistency.model != consistency_spec::bsp)
    return fmt::format("it is {}: only BSP settles at a clock boundary",
                       to_string(j.report.spec.consistency));
  (void) st;
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
  auto& st = self->state;
  auto& j = st.jobs.at(id);
  auto name = j.report.name;
  auto before = j.report.layout;
  job_layout next = before;
  next.nodes.clear();
  next.addresses.clear();
  next.racks.clear();
  std::vector<uint32_t> kept;
  for (size_t i = 0; i < j.node_ids.size(); ++i) {
    if (j.node_ids[i] == run->node_id)
      continue;
    kept.push_back(j.node_ids[i]);
    next.nodes.push_back(before.nodes.at(i));
    if (i < before.addresses.size())
      next.addresses.push_back(before.addresses[i]);
    if (i < before.racks.size())
      next.racks.push_back(before.racks[i]);
  }
  next.ring_version = before.ring_version + 1;
  auto all = j.node_ids;
  auto t0 = steady_clock::now();
  auto settle = std::chrono::milliseconds(defaults::move_settle_timeout_ms)
                + 2 * st.settings.node_request_timeout;
  spdlog::info("job moving: job='{}' id={}: off node {}, from [{}] to [{}] (ring version {})",
               name, id, run->node, fmt::join(before.nodes, ","), fmt::join(next.nodes, ","),
               next.ring_version);
  ask_each<chunk_moves>(
    self, all, settle, "settled its chunks",
    [=](std::map<uint32_t, chunk_moves>& fenced, std::vector<std::string>& failures) {
      auto& st = self->state;
      if (st.jobs.count(id) == 0)
        return job_done(self, run, fmt::format("{}: it ended while it settled", name), false);
      if (!failures.empty()) {
        auto why = fmt::format("the move was given up, the job goes on where it was: {}",
                               fmt::join(failures, "; "));
        spdlog::warn("job move failed: job='{}' id={}: {}", name, id, why);
        ask_each<ok_atom>(self, all, st.settings.node_request_timeout, "thawed the job",
                          [](auto&, auto&) {}, thaw_atom::value, id);
        return job_done(self, run, fmt::format("{}: {}", name, why), false);
      }
      chunk_moves pooled;
      size_t files = 0, bytes = 0;
      for (auto& [from, m] : fenced)
        for (auto& mv : m.moves) {
          ++files;
          bytes += mv.file.size();
          pooled.moves.push_back(std::move(mv));
        }
      auto t1 = steady_clock::now();
      ask_each<ok_atom>(
        self, kept, std::chrono::milliseconds(defaults::shard_setup_timeout_ms)
                      + st.settings.node_request_timeout,
        "took its part of the moved job",
        [=](auto&, std::vector<std::string>& failures) {
          auto& st = self->state;
          if (st.jobs.count(id) == 0)
            return job_done(self, run, fmt::format("{}: it ended while it moved", name), false);
          if (!failures.empty()) {
            auto why = fmt::format("its chunks could not be rebuilt on the nodes left: {}",
                                   fmt::join(failures, "; "));
            fail_job(self, id, why);
            return job_done(self, run, fmt::format("{}: failed: {}", name, why), false);
          }
          auto& j = st.jobs.at(id);
          j.report.layout = next;
          j.node_ids = kept;
          j.report.node = next.nodes.front();
          if (auto m = st.nodes.find(kept.front()); m != st.nodes.end())
            j.report.endpoints = m->second.info.endpoints;
          save_job(self, id);
          ask_each<ok_atom>(
            self, all, st.settings.node_request_timeout, "told its workers the new ring",
            [=](auto&, std::vector<std::string>& failures) {
              for (auto& f : failures)
                spdlog::warn("job '{}': {}", name, f);
              auto ms = [](auto a, auto b) {
                return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
              };
              auto done = steady_clock::now();
              spdlog::info("job moved: job='{}' id={}: off node {} to [{}] (ring version {}) "
                           "in {} ms: settled in {} ms, {} chunk file(s) of {} bytes moved "
                           "and rebuilt in {} ms",
                           name, id, run->node, fmt::join(next.nodes, ","), next.ring_version,
                           ms(t0, done), ms(t0, t1), files, bytes, ms(t1, done));
              job_done(self, run,
                       fmt::format("{}: moved to [{}] in {} ms ({} bytes of chunks)", name,
                                   fmt::join(next.nodes, ","), ms(t0, done), bytes),
                       true);
            },
            reroute_atom::value, id, next);
        },
        reshape_atom::value, id, next, std::move(pooled));
    },
    fence_atom::value, id, next);
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
    auto why = unmovable(st, j);
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
