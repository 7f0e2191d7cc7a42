// The cluster's job registry: a job's status (live from its nodes), stopping and
// deleting it, and the news nodes send (creating one: cluster/create.cpp). A job on several nodes is one job: it runs once any node has a
// worker, finishes once every node has finished, and fails everywhere when any node
// fails it or leaves the cluster.

#include <algorithm>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"
#include "actors/cluster/state.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

const std::string stopped_by_operator = "stopped by an operator";

} // namespace

job_entry* job_named(cluster_ptr self, const std::string& name) {
  auto n = self->state.by_name.find(name);
  if (n == self->state.by_name.end())
    return nullptr;
  return &self->state.jobs.at(n->second);
}

namespace {

caf::error unknown(cluster_ptr self, const std::string& name) {
  std::vector<std::string> names;
  for (auto& [id, j] : self->state.jobs)
    names.push_back(j.report.name);
  return cluster_error(
    errc::unknown_job,
    names.empty()
      ? fmt::format("no job named '{}' (there are no jobs)", name)
      : fmt::format("no job named '{}' (jobs: {})", name, fmt::join(names, ", ")));
}

// Ends job `j` with `state` and records it (state database); shells hear of it once it
// is recorded (when_recorded).
void mark_ended(cluster_ptr self, job_entry& j, const std::string& state,
                const std::string& reason) {
  if (is_ended(j.report.state))
    return;
  j.report.state = state;
  j.report.reason = reason;
  j.report.ended_unix_ms = unix_ms();
  save_job(self, j.report.id);
  release_bindings(j, fmt::format("job '{}' {}{}{}", j.report.name, state,
                                  reason.empty() ? "" : ": ", reason));
}

std::string node_name(cluster_ptr self, uint32_t id) {
  auto it = self->state.nodes.find(id);
  return it == self->state.nodes.end() ? fmt::format("id {}", id) : it->second.info.name;
}

// One rank's counts over every node of the job: counts add up, the clock is the
// furthest any node saw, and the rank is live while any node has it live.
std::vector<rank_report> merge_ranks(
  const std::vector<const std::vector<rank_report>*>& parts) {
  std::vector<rank_report> out;
  for (auto* ranks : parts)
    for (auto& r : *ranks) {
      if (out.size() <= r.rank)
        out.resize(r.rank + 1);
      auto& x = out[r.rank];
      x.rank = r.rank;
      if (x.state.empty() || r.state == "live"
          || (r.state == "left" && x.state == "absent"))
        x.state = r.state;
      if (x.peer.empty())
        x.peer = r.peer;
      x.clock = std::max(x.clock, r.clock);
      x.pushes += r.pushes;
      x.pulls += r.pulls;
      x.bytes_in += r.bytes_in;
      x.bytes_out += r.bytes_out;
      x.wait_us += r.wait_us;
    }
  return out;
}

} // namespace

// Fails the job on the given nodes, without waiting (it failed on another node, or a
// node of it left).
void halt_on(cluster_ptr self, const std::vector<uint32_t>& ids, uint32_t job_id,
             const std::string& why) {
  ask_nodes<ok_atom>(
    self, ids, "did not fail the job",
    [job_id](auto&, std::vector<std::string>& failures) {
      for (auto& f : failures)
        spdlog::warn("job {}: could not fail it on every node: {}", job_id, f);
    },
    abort_atom::value, job_id, why);
}

namespace {

std::vector<uint32_t> others(const job_entry& j, uint32_t but) {
  std::vector<uint32_t> out;
  for (auto id : j.node_ids)
    if (id != but)
      out.push_back(id);
  return out;
}

// After asking every node of job `it` points at: true if the job still exists and every
// node answered; otherwise answers `rp` with why and returns false.
template <class Promise>
bool answered_by_all(cluster_ptr self, Promise& rp,
                     std::map<uint32_t, job_entry>::iterator it,
                     const std::vector<std::string>& failures) {
  if (it == self->state.jobs.end()) {
    rp.deliver(cluster_error(errc::unknown_job, "the job was deleted meanwhile"));
    return false;
  }
  if (!failures.empty()) {
    rp.deliver(
      cluster_error(errc::unavailable, fmt::format("{}", fmt::join(failures, "; "))));
    return false;
  }
  return true;
}

} // namespace

namespace {

// Ends job `j` (its node `node_id` reported `state` with `why`) and stops it on its
// other nodes.
void end_everywhere(cluster_ptr self, job_entry& j, uint32_t id, uint32_t node_id,
                    const std::string& state, const std::string& why) {
  spdlog::info("job ended: job='{}' id={} state={}{}{}", j.report.name, id, state,
               why.empty() ? "" : ": ", why);
  mark_ended(self, j, state, why);
  halt_on(self, others(j, node_id), id, why);
}

} // namespace

caf::result<job_report> job_status(cluster_ptr self, const std::string& name) {
  auto* j = job_named(self, name);
  if (j == nullptr)
    return unknown(self, name);
  if (j->report.state != "running")
    return when_recorded(self, j->report);
  // Just after a restart from the state database, a node of the job that has not
  // registered again yet (it has --node-timeout-ms to) cannot be asked: the report as
  // recorded, without live counts, not "it has left the cluster".
  for (auto n : j->node_ids)
    if (self->state.nodes.count(n) == 0
        && std::any_of(self->state.awaited.begin(), self->state.awaited.end(),
                       [n](const auto& a) { return a.second == n; }))
      return when_recorded(self, j->report);
  auto rp = self->make_response_promise<job_report>();
  auto id = j->report.id;
  ask_nodes<job_event>(
    self, j->node_ids, "did not report the job's status",
    [self, rp, id](std::map<uint32_t, job_event>& answers,
                   std::vector<std::string>& failures) mutable {
      auto it = self->state.jobs.find(id);
      if (!answered_by_all(self, rp, it, failures))
        return;
      auto& r = it->second.report;
      auto tensors = r.spec.tensors.size();
      std::vector<const std::vector<rank_report>*> parts;
      for (auto& [node, ev] : answers) {
        if (is_ended(ev.state)) {
          // It ended meanwhile: its final counts come with the node's end event.
          mark_ended(self, it->second, ev.state, ev.reason);
          continue;
        }
        if (ev.spec.tensors.size() > r.spec.tensors.size())
          r.spec = ev.spec;
        parts.push_back(&ev.ranks);
      }
      if (!is_ended(r.state) && !parts.empty()) {
        r.ranks = merge_ranks(parts);
        r.lateness.clear();
        for (auto& [node, ev] : answers)
          if (!is_ended(ev.state))
            for (auto& late : ev.lateness)
              merge_lateness(r.lateness, late);
      }
      if (r.spec.tensors.size() != tensors)
        save_job(self, id); // the tensors its workers declared
      deliver_when_recorded(self, rp, r);
    },
    status_atom::value, id);
  return rp;
}

caf::result<job_report> stop_job(cluster_ptr self, const std::string& name) {
  auto* j = job_named(self, name);
  if (j == nullptr)
    return unknown(self, name);
  if (is_ended(j->report.state))
    return when_recorded(self, j->report); // nothing to stop
  auto id = j->report.id;
  std::vector<uint32_t> live;
  for (auto n : j->node_ids)
    if (self->state.nodes.count(n) != 0)
      live.push_back(n);
  if (live.empty()) {
    mark_ended(self, *j, "stopped", stopped_by_operator);
    return when_recorded(self, j->report);
  }
  auto rp = self->make_response_promise<job_report>();
  ask_nodes<ok_atom>(
    self, live, "did not stop the job",
    [self, rp, id](auto&, std::vector<std::string>& failures) mutable {
      auto it = self->state.jobs.find(id);
      if (!answered_by_all(self, rp, it, failures))
        return;
      mark_ended(self, it->second, "stopped", stopped_by_operator);
      spdlog::info("job stopped: job='{}' id={}", it->second.report.name, id);
      deliver_when_recorded(self, rp, it->second.report);
    },
    halt_atom::value, id, stopped_by_operator);
  return rp;
}

caf::result<ok_atom> remove_job(cluster_ptr self, const std::string& name) {
  auto* j = job_named(self, name);
  if (j == nullptr)
    return unknown(self, name);
  auto id = j->report.id;
  auto forget = [self, id] {
    auto it = self->state.jobs.find(id);
    if (it == self->state.jobs.end())
      return;
    spdlog::info("job deleted: job='{}' id={}", it->second.report.name, id);
    unsave_job(self, id);
    release_bindings(it->second,
                     fmt::format("job '{}' was deleted", it->second.report.name));
    self->state.by_name.erase(it->second.report.name);
    self->state.jobs.erase(it);
  };
  std::vector<uint32_t> live;
  for (auto n : j->node_ids)
    if (self->state.nodes.count(n) != 0)
      live.push_back(n);
  if (is_ended(j->report.state) || live.empty()) {
    forget();
    return when_recorded(self, ok_atom::value);
  }
  auto rp = self->make_response_promise<ok_atom>();
  ask_nodes<ok_atom>(
    self, live, "did not stop the job, so it was not deleted",
    [self, rp, forget](auto&, std::vector<std::string>& failures) mutable {
      if (!failures.empty()) {
        rp.deliver(
          cluster_error(errc::unavailable, fmt::format("{}", fmt::join(failures, "; "))));
        return;
      }
      forget();
      deliver_when_recorded(self, rp, ok_atom::value);
    },
    halt_atom::value, id, std::string{"deleted by an operator"});
  return rp;
}

void on_event(cluster_ptr self, uint32_t node_id, job_event& ev) {
  auto it = self->state.jobs.find(ev.job_id);
  if (it == self->state.jobs.end() || !it->second.on_node(node_id))
    return; // deleted meanwhile, or not this node's
  auto& j = it->second;
  j.node_news[node_id] = ev;
  auto tensors = j.report.spec.tensors.size();
  if (ev.spec.tensors.size() >= tensors)
    j.report.spec = ev.spec;
  std::vector<const std::vector<rank_report>*> parts;
  for (auto& [n, news] : j.node_news)
    parts.push_back(&news.ranks);
  j.report.ranks = merge_ranks(parts);
  j.report.lateness.clear();
  for (auto& [n, news] : j.node_news)
    for (auto& late : news.lateness)
      merge_lateness(j.report.lateness, late);
  if (ev.state == "running" && j.report.state == "created") {
    j.report.state = "running";
    j.report.started_unix_ms = unix_ms();
    spdlog::info("job running: job='{}' id={} nodes=[{}]", j.report.name, ev.job_id,
                 fmt::join(j.report.layout.nodes, ","));
    save_job(self, ev.job_id);
    return;
  }
  if (j.report.spec.tensors.size() != tensors && !is_ended(ev.state))
    save_job(self, ev.job_id);
  if (!is_ended(ev.state) || is_ended(j.report.state))
    return;
  if (ev.state == "finished") {
    for (auto n : j.node_ids) {
      auto news = j.node_news.find(n);
      if (news == j.node_news.end() || news->second.state != "finished")
        return; // another node still serves the job
    }
    spdlog::info("job ended: job='{}' id={} state=finished", j.report.name, ev.job_id);
    mark_ended(self, j, "finished", "");
    return;
  }
  if (j.node_ids.size() == 1) {
    end_everywhere(self, j, ev.job_id, node_id, ev.state, ev.reason);
    return;
  }
  // What one node saw (a worker that vanished, a rack that left) may be the echo of
  // another node's death: ask the others first, and name any that does not answer.
  auto why = fmt::format("on node {}: {}", node_name(self, node_id), ev.reason);
  auto id = ev.job_id;
  auto state = ev.state;
  ask_nodes<job_event>(
    self, others(j, node_id), "did not answer",
    [self, id, node_id, state, why](auto&, std::vector<std::string>& failures) {
      auto it = self->state.jobs.find(id);
      if (it == self->state.jobs.end() || is_ended(it->second.report.state))
        return;
      auto reason = failures.empty()
                      ? why
                      : fmt::format("{}; {}", fmt::join(failures, "; "), why);
      end_everywhere(self, it->second, id, node_id, state, reason);
    },
    status_atom::value, id);
}

void fail_jobs_on(cluster_ptr self, uint32_t node_id, const std::string& why) {
  std::vector<uint32_t> hit;
  for (auto& [id, j] : self->state.jobs)
    if (j.on_node(node_id) && !is_ended(j.report.state))
      hit.push_back(id);
  for (auto id : hit) {
    if (take_over(self, id, node_id, why)
        || restart_from_checkpoint(self, id, node_id, why))
      continue;
    auto& j = self->state.jobs.at(id);
    spdlog::error("job failed: job='{}' id={}: {}", j.report.name, id, why);
    mark_ended(self, j, "failed", why);
    halt_on(self, others(j, node_id), id, why);
  }
}

void fail_job(cluster_ptr self, uint32_t id, const std::string& why) {
  auto it = self->state.jobs.find(id);
  if (it == self->state.jobs.end() || is_ended(it->second.report.state))
    return;
  spdlog::error("job failed: job='{}' id={}: {}", it->second.report.name, id, why);
  mark_ended(self, it->second, "failed", why);
  halt_on(self, it->second.node_ids, id, why);
}

} // namespace rw::actors::detail
