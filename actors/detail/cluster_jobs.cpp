// The cluster's job registry: creating a job (validate, place, grant, token), its
// status (live from its node), stopping and deleting it, and the news nodes send.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/detail/cluster_state.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

const std::string stopped_by_operator = "stopped by an operator";

job_entry* find(cluster_ptr self, const std::string& name) {
  auto n = self->state.by_name.find(name);
  if (n == self->state.by_name.end())
    return nullptr;
  return &self->state.jobs.at(n->second);
}

caf::error unknown(cluster_ptr self, const std::string& name) {
  std::vector<std::string> names;
  for (auto& [id, j] : self->state.jobs)
    names.push_back(j.report.name);
  return cluster_error(errc::unknown_job,
                       names.empty()
                         ? fmt::format("no job named '{}' (there are no jobs)", name)
                         : fmt::format("no job named '{}' (jobs: {})", name,
                                       fmt::join(names, ", ")));
}

// Picks the node: the one named, or the live node with the fewest live jobs.
member* place(cluster_ptr self, const std::string& placement, std::string& why) {
  auto& st = self->state;
  if (st.nodes.empty()) {
    why = "no rack-agg node is live in the cluster";
    return nullptr;
  }
  std::vector<std::string> names;
  member* best = nullptr;
  uint32_t best_load = UINT32_MAX;
  for (auto& [id, m] : st.nodes) {
    names.push_back(m.info.name);
    if (!placement.empty()) {
      if (m.info.name == placement)
        return &m;
      continue;
    }
    uint32_t load = 0;
    for (auto& [jid, j] : st.jobs)
      if (j.node_id == id && !is_ended(j.report.state))
        ++load;
    if (load < best_load) {
      best = &m;
      best_load = load;
    }
  }
  if (best == nullptr)
    why = fmt::format("no live node is named '{}' (live nodes: {})", placement,
                      fmt::join(names, ", "));
  return best;
}

void mark_ended(job_entry& j, const std::string& state, const std::string& reason) {
  if (is_ended(j.report.state))
    return;
  j.report.state = state;
  j.report.reason = reason;
  j.report.ended_unix_ms = unix_ms();
}

} // namespace

caf::result<job_created> create_job(cluster_ptr self, job_spec& spec,
                                    const std::string& placement) {
  auto& st = self->state;
  if (!spec.tensors.empty())
    return cluster_error(errc::invalid_spec, "a job is created without tensors: its "
                                             "workers declare them when they join");
  auto probe = spec;
  probe.tensors.push_back({"probe", 1, false});
  if (auto why = validate(probe, st.settings.max_chunk_bytes, st.settings.max_workers);
      !why.empty())
    return cluster_error(errc::invalid_spec, "invalid job spec: " + why);
  if (auto* old = find(self, spec.name))
    return cluster_error(errc::duplicate_name,
                         fmt::format("a job named '{}' exists already (state {}); delete it "
                                     "first (rw.job_delete) or pick another name",
                                     spec.name, old->report.state));
  std::string why;
  auto* node = place(self, placement, why);
  if (node == nullptr)
    return cluster_error(errc::unavailable, "cannot place the job: " + why);
  job_entry j;
  j.report.id = st.next_job_id++;
  j.report.name = spec.name;
  j.report.state = "created";
  j.report.node = node->info.name;
  j.report.endpoints = node->info.endpoints;
  j.report.spec = spec;
  j.report.created_unix_ms = unix_ms();
  j.token = runtime::make_token();
  j.node_id = node->info.id;
  auto id = j.report.id;
  auto node_name = node->info.name;
  auto grant = job_grant{id, spec, j.token};
  // The name is taken from now on; a refused grant gives it back.
  st.by_name[spec.name] = id;
  st.jobs.emplace(id, std::move(j));
  auto rp = self->make_response_promise<job_created>();
  self->request(node->link, st.settings.node_request_timeout, grant_atom::value, grant)
    .then(
      [self, rp, id](ok_atom) mutable {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) {
          rp.deliver(cluster_error(errc::unavailable, "the job's node left while the job "
                                                      "was being created"));
          return;
        }
        auto& r = it->second.report;
        spdlog::info("job created: job='{}' id={} node={} workers={} consistency={} "
                     "optimizer={} chunk_bytes={}",
                     r.name, id, r.node, r.spec.num_workers, to_string(r.spec.consistency),
                     to_string(r.spec.optimizer.kind), r.spec.chunk_bytes);
        rp.deliver(job_created{r, it->second.token});
      },
      [self, rp, id, node_name, link = node->link](caf::error& err) mutable {
        auto it = self->state.jobs.find(id);
        if (it != self->state.jobs.end()) {
          self->state.by_name.erase(it->second.report.name);
          self->state.jobs.erase(it);
        }
        // The node may have taken the grant after all (late): end it there too.
        self->request(link, self->state.settings.node_request_timeout, halt_atom::value, id,
                      std::string{"the job was not created (the node answered too late)"})
          .then([](ok_atom) {}, [](caf::error&) {});
        auto msg = fmt::format("node {} did not take the job: {}", node_name,
                               describe(self->system(), err));
        spdlog::warn("job not created: id={}: {}", id, msg);
        rp.deliver(cluster_error(errc::unavailable, msg));
      });
  return rp;
}

caf::result<job_report> job_status(cluster_ptr self, const std::string& name) {
  auto* j = find(self, name);
  if (j == nullptr)
    return unknown(self, name);
  auto node = self->state.nodes.find(j->node_id);
  if (j->report.state != "running" || node == self->state.nodes.end())
    return j->report;
  auto rp = self->make_response_promise<job_report>();
  auto id = j->report.id;
  auto node_name = node->second.info.name;
  self->request(node->second.link, self->state.settings.node_request_timeout,
                status_atom::value, id)
    .then(
      [self, rp, id](job_event& ev) mutable {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) {
          rp.deliver(cluster_error(errc::unknown_job, "the job was deleted meanwhile"));
          return;
        }
        auto& r = it->second.report;
        if (ev.state == "running" && !is_ended(r.state)) {
          r.spec = ev.spec;
          r.ranks = ev.ranks;
        } else if (is_ended(ev.state)) {
          // It ended meanwhile: its final counts come with the node's end event.
          mark_ended(it->second, ev.state, ev.reason);
        }
        rp.deliver(r);
      },
      [self, rp, node_name](caf::error& err) mutable {
        rp.deliver(cluster_error(errc::unavailable,
                                 fmt::format("node {} did not report the job's status: {}",
                                             node_name, describe(self->system(), err))));
      });
  return rp;
}

caf::result<job_report> stop_job(cluster_ptr self, const std::string& name) {
  auto* j = find(self, name);
  if (j == nullptr)
    return unknown(self, name);
  if (is_ended(j->report.state))
    return j->report; // nothing to stop
  auto id = j->report.id;
  auto node = self->state.nodes.find(j->node_id);
  if (node == self->state.nodes.end()) {
    mark_ended(*j, "stopped", stopped_by_operator);
    return j->report;
  }
  auto rp = self->make_response_promise<job_report>();
  auto node_name = node->second.info.name;
  self->request(node->second.link, self->state.settings.node_request_timeout,
                halt_atom::value, id, stopped_by_operator)
    .then(
      [self, rp, id](ok_atom) mutable {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) {
          rp.deliver(cluster_error(errc::unknown_job, "the job was deleted meanwhile"));
          return;
        }
        mark_ended(it->second, "stopped", stopped_by_operator);
        spdlog::info("job stopped: job='{}' id={}", it->second.report.name, id);
        rp.deliver(it->second.report);
      },
      [self, rp, node_name](caf::error& err) mutable {
        rp.deliver(cluster_error(errc::unavailable,
                                 fmt::format("node {} did not stop the job: {}", node_name,
                                             describe(self->system(), err))));
      });
  return rp;
}

caf::result<ok_atom> remove_job(cluster_ptr self, const std::string& name) {
  auto* j = find(self, name);
  if (j == nullptr)
    return unknown(self, name);
  auto id = j->report.id;
  auto forget = [self, id] {
    auto it = self->state.jobs.find(id);
    if (it == self->state.jobs.end())
      return;
    spdlog::info("job deleted: job='{}' id={}", it->second.report.name, id);
    self->state.by_name.erase(it->second.report.name);
    self->state.jobs.erase(it);
  };
  auto node = self->state.nodes.find(j->node_id);
  if (is_ended(j->report.state) || node == self->state.nodes.end()) {
    forget();
    return ok_atom::value;
  }
  auto rp = self->make_response_promise<ok_atom>();
  auto node_name = node->second.info.name;
  self->request(node->second.link, self->state.settings.node_request_timeout,
                halt_atom::value, id, std::string{"deleted by an operator"})
    .then(
      [rp, forget](ok_atom) mutable {
        forget();
        rp.deliver(ok_atom::value);
      },
      [self, rp, node_name](caf::error& err) mutable {
        rp.deliver(cluster_error(errc::unavailable,
                                 fmt::format("node {} did not stop the job, so it was not "
                                             "deleted: {}",
                                             node_name, describe(self->system(), err))));
      });
  return rp;
}

void on_event(cluster_ptr self, uint32_t node_id, job_event& ev) {
  auto it = self->state.jobs.find(ev.job_id);
  if (it == self->state.jobs.end() || it->second.node_id != node_id)
    return; // deleted meanwhile, or not this node's
  auto& j = it->second;
  j.report.spec = ev.spec;
  j.report.ranks = ev.ranks;
  if (ev.state == "running" && j.report.state == "created") {
    j.report.state = "running";
    j.report.started_unix_ms = unix_ms();
    spdlog::info("job running: job='{}' id={} node={}", j.report.name, ev.job_id,
                 j.report.node);
  } else if (is_ended(ev.state)) {
    if (!is_ended(j.report.state))
      spdlog::info("job ended: job='{}' id={} state={}{}{}", j.report.name, ev.job_id,
                   ev.state, ev.reason.empty() ? "" : ": ", ev.reason);
    mark_ended(j, ev.state, ev.reason);
  }
}

void fail_jobs_on(cluster_ptr self, uint32_t node_id, const std::string& why) {
  for (auto& [id, j] : self->state.jobs)
    if (j.node_id == node_id && !is_ended(j.report.state)) {
      spdlog::error("job failed: job='{}' id={}: {}", j.report.name, id, why);
      mark_ended(j, "failed", why);
    }
}

} // namespace rw::actors::detail
