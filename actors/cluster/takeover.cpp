// Node failover by replicas: a flat BSP job created with replicas = 1 has every chunk
// served by its home and by its replica (the next other node on the ring), which takes
// each step's sum from the home and runs the same step on it (actors/links/mirror_link); the
// home answers only steps its replica has. When a node dies, the ring without it homes
// each of its chunks exactly at that replica (consistent hashing), so nothing moves:
// every node left keeps the chunks it served, state included, and the replicas of the
// dead node's chunks answer from now on. Two phases over the nodes left: takeover (each
// takes the new routes; a home whose step waited for the dead replica's ack runs it),
// then reroute (its workers hear the new ring and send again what is unanswered; pushes
// of a step the replica has are dropped and answered). The job goes on without replicas; where
// two nodes or more are left it then gets them back (a second later): a move to the same nodes with
// replicas = 1 (actors/cluster/move.cpp) copies every chunk's state to its new replica
// at a clock boundary, so a second node's death is survived too. (With one node left,
// a second loss falls back to a checkpoint, or fails the job.)

#include <algorithm>
#include <chrono>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"

namespace rw::actors::detail {

namespace {

// A job taken over gets its replicas back this long after: the steps the takeover
// interrupted complete first (workers send again what was unanswered), so the move
// settles at once. A move given up (a step that did not settle) is tried again as
// long, up to replicate_attempts times.
constexpr auto replicate_pause = std::chrono::seconds(1);
constexpr uint32_t replicate_attempts = 3;

} // namespace

void replicate_again(cluster_ptr self, uint32_t id, uint64_t from, uint32_t attempt) {
  auto it = self->state.jobs.find(id);
  if (it == self->state.jobs.end())
    return;
  auto& j = it->second;
  auto& now = j.report.layout;
  if (j.report.state != "running" || now.ring_version != from || now.replicas != 0
      || j.node_ids.size() < 2)
    return; // it ended, or moved, or lost a node meanwhile
  auto again = now;
  again.ring_version = from + 1;
  again.replicas = 1;
  auto name = j.report.name;
  move_job_to(
    self, id, again, j.node_ids, "its replicas made again after a takeover",
    [=](const std::string& line, bool moved) {
      if (moved) {
        spdlog::info("job has replicas again: {}", line);
      } else if (attempt < replicate_attempts) {
        spdlog::warn(
          "job '{}' has no replicas yet: {}; trying again in {} ms "
          "(attempt {} of {})",
          name, line,
          std::chrono::duration_cast<std::chrono::milliseconds>(replicate_pause).count(),
          attempt + 1, replicate_attempts);
        self->delayed_send(self, replicate_pause, replicate_atom::value, id, from,
                           attempt + 1);
      } else {
        spdlog::warn("job '{}' goes on without replicas: {}", name, line);
      }
    });
}

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
  spdlog::warn(
    "node failover: job='{}' id={}: {}; the replicas on [{}] take over its chunks "
    "(ring version {})",
    name, id, why, fmt::join(next.nodes, ","), next.ring_version);
  // From here the job lives on the nodes left (a second loss meanwhile fails it).
  j.report.layout = next;
  j.node_ids = kept;
  j.node_news.erase(dead);
  j.report.node = next.nodes.front();
  if (auto m = st.nodes.find(kept.front()); m != st.nodes.end())
    j.report.endpoints = m->second.info.endpoints;
  // Recorded on the writer's thread while the nodes are asked: a commit does not
  // delay the takeover. (A coordinator killed before the commit is durable comes back
  // with the old layout; the dead node never registers again, so the job fails after
  // --node-timeout, with that reason.)
  save_job(self, id);
  auto t0 = std::chrono::steady_clock::now();
  ask_each<ok_atom>(
    self, kept,
    std::chrono::milliseconds(defaults::shard_setup_timeout_ms)
      + st.settings.node_request_timeout,
    "took over the dead node's chunks",
    [=](auto&, std::vector<std::string>& failures) {
      if (!failures.empty()) {
        fail_job(self, id,
                 fmt::format("{}; the replicas could not take over: {}", why,
                             fmt::join(failures, "; ")));
        return;
      }
      ask_each<ok_atom>(
        self, kept, self->state.settings.node_request_timeout,
        "told its workers the new ring",
        [=](auto&, std::vector<std::string>& failures) {
          for (auto& f : failures)
            spdlog::warn("job '{}': {}", name, f);
          spdlog::warn(
            "job taken over: job='{}' id={}: it goes on on [{}] (ring version {}, "
            "no replicas now) {} ms after the node's loss was noticed",
            name, id, fmt::join(next.nodes, ","), next.ring_version,
            std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - t0)
              .count());
          if (kept.size() < 2)
            return;
          self->delayed_send(self, replicate_pause, replicate_atom::value, id,
                             next.ring_version, uint32_t{1});
        },
        reroute_atom::value, id, next);
    },
    takeover_atom::value, id, next);
  return true;
}

} // namespace rw::actors::detail
