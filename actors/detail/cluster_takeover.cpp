// Node failover by replicas: a flat BSP job created with replicas = 1 has every chunk
// served by its home and by its replica (the next other node on the ring), which
// counts every push as the home does and answers nobody. When a node dies, the ring
// without it homes each of its chunks exactly at that replica (consistent hashing), so
// nothing moves: every node left keeps the chunks it served, state and step in progress
// included, and the replicas of the dead node's chunks answer from now on. Two phases
// over the nodes left: takeover (each takes the new routes), then reroute (its workers
// hear the new ring and send again what is unanswered; pushes a replica had counted
// are dropped and answered as the first were). The job goes on without replicas; where
// two nodes or more are left it then gets them back: a move to the same nodes with
// replicas = 1 (detail/cluster_move.cpp) copies every chunk's state to its new replica
// at a clock boundary, so a second node's death is survived too. (With one node left,
// a second loss falls back to a checkpoint, or fails the job.)

#include <algorithm>
#include <chrono>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/detail/cluster_ask.hpp"

namespace rw::actors::detail {

bool take_over(cluster_ptr self, uint32_t id, uint32_t dead, const std::string& why) {
  auto& st = self->state;
  auto it = st.jobs.find(id);
  if (it == st.jobs.end())
    return false;
  auto& j = it->second;
  auto& before = j.report.layout;
  if (before.replicas == 0 || is_hierarchical(before) || j.report.state != "running")
    return false;
  for (auto n : j.node_ids)
    if (n != dead && st.nodes.count(n) == 0)
      return false; // another of its nodes is gone too: the replicas may be with it
  std::vector<uint32_t> kept;
  auto next = layout_without(j, dead, kept);
  if (kept.empty() || kept.size() == j.node_ids.size())
    return false;
  next.replicas = 0;
  next.plan = before.plan + "; replicas took over from a dead node";
  auto name = j.report.name;
  spdlog::warn("node failover: job='{}' id={}: {}; the replicas on [{}] take over its chunks "
               "(ring version {})",
               name, id, why, fmt::join(next.nodes, ","), next.ring_version);
  // From here the job lives on the nodes left (a second loss meanwhile fails it).
  j.report.layout = next;
  j.node_ids = kept;
  j.node_news.erase(dead);
  j.report.node = next.nodes.front();
  if (auto m = st.nodes.find(kept.front()); m != st.nodes.end())
    j.report.endpoints = m->second.info.endpoints;
  save_job(self, id);
  auto t0 = std::chrono::steady_clock::now();
  ask_each<ok_atom>(
    self, kept,
    std::chrono::milliseconds(defaults::shard_setup_timeout_ms) + st.settings.node_request_timeout,
    "took over the dead node's chunks",
    [=](auto&, std::vector<std::string>& failures) {
      if (!failures.empty()) {
        fail_job(self, id,
                 fmt::format("{}; the replicas could not take over: {}", why,
                             fmt::join(failures, "; ")));
        return;
      }
      ask_each<ok_atom>(
        self, kept, self->state.settings.node_request_timeout, "told its workers the new ring",
        [=](auto&, std::vector<std::string>& failures) {
          for (auto& f : failures)
            spdlog::warn("job '{}': {}", name, f);
          spdlog::warn("job taken over: job='{}' id={}: it goes on on [{}] (ring version {}, "
                       "no replicas now) {} ms after the node's loss was noticed",
                       name, id, fmt::join(next.nodes, ","), next.ring_version,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - t0)
                         .count());
          if (kept.size() < 2)
            return;
          auto again = next;
          again.ring_version = next.ring_version + 1;
          again.replicas = 1;
          move_job_to(self, id, again, kept, "its replicas made again after a takeover",
                      [name](const std::string& line, bool moved) {
                        if (moved)
                          spdlog::info("job has replicas again: {}", line);
                        else
                          spdlog::warn("job '{}' goes on without replicas: {}", name, line);
                      });
        },
        reroute_atom::value, id, next);
    },
    takeover_atom::value, id, next);
  return true;
}

} // namespace rw::actors::detail
