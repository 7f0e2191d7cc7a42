// Moving a running job to a new layout (the ring of `next`: fewer nodes after a drain,
// or the same nodes with replicas again after a takeover), the coordinator's side, in
// three phases over the job's nodes (the nodes' side: actors/rack/moves.cpp):
//   fence    every node of the job settles its chunks at a clock boundary (steps begun
//            finish, none begins) and freezes them; the chunks the new ring has served
//            elsewhere (their new home, and their new replica) come back, per node, as
//            chunk files
//   reshape  each node of the new ring rebuilds its part from the chunks it kept and
//            those moved to it
//   reroute  every node tells its workers the new ring; they send again what is
//            unanswered; a node the new ring leaves out lets the job go
// A failed fence gives the move up (every node thaws; the job goes on where it was); a
// failed reshape fails the job, as its state is then split.

#include <chrono>
#include <functional>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"

namespace rw::actors::detail {

using steady_clock = std::chrono::steady_clock;

std::string unmovable(const job_entry& j) {
  if (j.report.state != "running")
    return j.report.state == "created" ? "no worker has joined it yet" : "it has ended";
  if (j.node_ids.size() < 2)
    return "it lives on one node alone (its workers are connected to no other)";
  if (is_hierarchical(j.report.layout))
    return "it reduces hierarchically (one rack-agg per rack)";
  if (j.report.spec.consistency.model != consistency_spec::bsp)
    return fmt::format("it is {}: only BSP settles at a clock boundary",
                       to_string(j.report.spec.consistency));
  return {};
}

member* live_node(cluster_state& st, const std::string& name) {
  for (auto& [id, m] : st.nodes)
    if (m.info.name == name)
      return &m;
  return nullptr;
}

caf::error no_live_node(const cluster_state& st, const char* call,
                        const std::string& name) {
  std::vector<std::string> names;
  for (auto& [id, m] : st.nodes)
    names.push_back(m.info.name);
  return cluster_error(errc::invalid_spec,
                       fmt::format("{}: no live node is named '{}' (live nodes: {})",
                                   call, name, fmt::join(names, ", ")));
}

void run_moves(cluster_ptr self, std::shared_ptr<moves_run> run) {
  auto& st = self->state;
  while (!run->todo.empty()) {
    auto id = run->todo.front();
    run->todo.erase(run->todo.begin());
    auto it = st.jobs.find(id);
    if (it == st.jobs.end())
      continue;
    if (live_node(st, run->node) == nullptr) {
      run->stayed.push_back(fmt::format("{}: node {} left the cluster meanwhile",
                                        it->second.report.name, run->node));
      continue;
    }
    bool started = run->move_one(id, [self, run](std::string line, bool moved) {
      (moved ? run->moved : run->stayed).push_back(std::move(line));
      run_moves(self, run);
    });
    if (started)
      return;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now()
                                                                  - run->started)
              .count();
  auto summary = run->summary(*run, ms);
  spdlog::info("{}", summary);
  run->rp.deliver(summary);
}

job_layout layout_without(const job_entry& j, uint32_t node_id,
                          std::vector<uint32_t>& kept) {
  auto& before = j.report.layout;
  job_layout next = before;
  next.nodes.clear();
  next.addresses.clear();
  next.racks.clear();
  kept.clear();
  for (size_t i = 0; i < j.node_ids.size(); ++i) {
    if (j.node_ids[i] == node_id)
      continue;
    kept.push_back(j.node_ids[i]);
    next.nodes.push_back(before.nodes.at(i));
    if (i < before.addresses.size())
      next.addresses.push_back(before.addresses[i]);
    if (i < before.racks.size())
      next.racks.push_back(before.racks[i]);
  }
  next.ring_version = before.ring_version + 1;
  return next;
}

void move_job_to(cluster_ptr self, uint32_t id, job_layout next,
                 std::vector<uint32_t> kept, std::string what,
                 std::function<void(std::string, bool)> done) {
  auto& st = self->state;
  auto& j = st.jobs.at(id);
  auto name = j.report.name;
  auto before = j.report.layout;
  auto all = j.node_ids;
  auto t0 = steady_clock::now();
  auto settle = std::chrono::milliseconds(defaults::move_settle_timeout_ms)
                + 2 * st.settings.node_request_timeout;
  spdlog::info(
    "job moving: job='{}' id={}: {}, from [{}] to [{}] (ring version {}, replicas "
    "{})",
    name, id, what, fmt::join(before.nodes, ","), fmt::join(next.nodes, ","),
    next.ring_version, next.replicas);
  ask_each<chunk_moves>(
    self, all, settle, "settled its chunks",
    [=](std::map<uint32_t, chunk_moves>& fenced, std::vector<std::string>& failures) {
      auto& st = self->state;
      if (st.jobs.count(id) == 0)
        return done(fmt::format("{}: it ended while it settled", name), false);
      if (!failures.empty()) {
        auto why = fmt::format("the move was given up, the job goes on where it was: {}",
                               fmt::join(failures, "; "));
        spdlog::warn("job move failed: job='{}' id={}: {}", name, id, why);
        ask_each<ok_atom>(
          self, all, st.settings.node_request_timeout, "thawed the job",
          [](auto&, auto&) {}, thaw_atom::value, id);
        return done(fmt::format("{}: {}", name, why), false);
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
        self, kept,
        std::chrono::milliseconds(defaults::shard_setup_timeout_ms)
          + st.settings.node_request_timeout,
        "took its part of the moved job",
        [=](auto&, std::vector<std::string>& failures) {
          auto& st = self->state;
          if (st.jobs.count(id) == 0)
            return done(fmt::format("{}: it ended while it moved", name), false);
          if (!failures.empty()) {
            auto why = fmt::format(
              "its chunks could not be rebuilt on the nodes left: {}",
              fmt::join(failures, "; "));
            fail_job(self, id, why);
            return done(fmt::format("{}: failed: {}", name, why), false);
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
                return std::chrono::duration_cast<std::chrono::milliseconds>(b - a)
                  .count();
              };
              auto end = steady_clock::now();
              spdlog::info(
                "job moved: job='{}' id={}: {} to [{}] (ring version {}, replicas {}) "
                "in {} ms: settled in {} ms, {} chunk file(s) of {} bytes moved "
                "and rebuilt in {} ms",
                name, id, what, fmt::join(next.nodes, ","), next.ring_version,
                next.replicas, ms(t0, end), ms(t0, t1), files, bytes, ms(t1, end));
              done(fmt::format("{}: moved to [{}] in {} ms ({} bytes of chunks)", name,
                               fmt::join(next.nodes, ","), ms(t0, end), bytes),
                   true);
            },
            reroute_atom::value, id, next);
        },
        reshape_atom::value, id, next, std::move(pooled));
    },
    fence_atom::value, id, next);
}

} // namespace rw::actors::detail
