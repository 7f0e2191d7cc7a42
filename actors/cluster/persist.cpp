// The coordinator's side of its state database (actors/cluster/store.hpp): sending
// each job transition to the writer (actors/cluster/store_writer.hpp), holding answers
// until what they report is recorded, taking the registry back at start, and
// reconciling with each node as it registers again after the restart.

#include <chrono>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"
#include "actors/cluster/store.hpp"
#include "actors/cluster/store_writer.hpp"

namespace rw::actors::detail {

namespace {

// Write `seq` is done (`why`: "" durable, else why not): `done` hears it, then whatever
// waited for writes up to it.
void written(cluster_ptr self, uint64_t seq, const std::string& why,
             const std::function<void(const std::string&)>& done) {
  auto& st = self->state;
  st.writes_done = std::max(st.writes_done, seq);
  if (done)
    done(why);
  while (!st.after_writes.empty() && st.after_writes.front().first <= st.writes_done) {
    auto fn = std::move(st.after_writes.front().second);
    st.after_writes.pop_front();
    fn();
  }
}

// Sends `w` to the writer (in order after every write sent before); `done` hears the
// outcome. Without a state database nothing is written and `done` hears "" at once.
void send_write(cluster_ptr self, store_write w,
                std::function<void(const std::string&)> done = {}) {
  auto& st = self->state;
  if (!st.writer) {
    if (done)
      done({});
    return;
  }
  auto seq = ++st.writes_sent;
  self->request(st.writer, caf::infinite, std::move(w))
    .then([self, seq, done](std::string& why) { written(self, seq, why, done); },
          [self, seq, done](caf::error& err) {
            auto why = fmt::format("the state database's writer stopped: {}",
                                   describe(self->system(), err));
            spdlog::error("{}", why);
            written(self, seq, why, done);
          });
}

} // namespace

void restore_registry(cluster_ptr self) {
  auto& st = self->state;
  auto& restored = st.settings.restored;
  if (!restored)
    return;
  uint32_t live = 0;
  uint32_t highest = 0;
  for (auto& s : restored->jobs) {
    job_entry j;
    j.report = s.report;
    j.token = s.token;
    j.restore = s.restore;
    j.checkpoint_every = s.checkpoint_every;
    j.checkpoint_dir = s.checkpoint_dir;
    j.last_checkpoint = s.last_checkpoint;
    j.last_checkpoint_clock = s.last_checkpoint_clock;
    highest = std::max(highest, s.report.id);
    if (!is_ended(j.report.state)) {
      ++live;
      // Each node keeps its place in the job by name: it gets this id when it
      // registers again (admit_node_id).
      for (auto& name : j.report.layout.nodes) {
        auto [at, fresh] = st.awaited.emplace(name, st.next_node_id);
        if (fresh)
          ++st.next_node_id;
        j.node_ids.push_back(at->second);
      }
    }
    st.by_name[j.report.name] = j.report.id;
    st.jobs.emplace(j.report.id, std::move(j));
  }
  if (restored->next_job_id != 0)
    st.next_job_id = std::max(restored->next_job_id, highest + 1);
  std::vector<std::string> names;
  for (auto& [name, id] : st.awaited)
    names.push_back(name);
  spdlog::info("cluster: registry restored from {}: {} job(s), {} live; next job id {}; "
               "waiting up to {} ms for node(s) [{}] to register again",
               st.settings.store->path(), st.jobs.size(), live, st.next_job_id,
               st.settings.node_timeout.count(), fmt::join(names, ", "));
}

void start_store_writer(cluster_ptr self) {
  auto& st = self->state;
  if (st.settings.store)
    st.writer = spawn_store_writer(self->system(), st.settings.store, self->address());
}

void save_job(cluster_ptr self, uint32_t id,
              std::function<void(const std::string&)> done) {
  auto& st = self->state;
  auto it = st.jobs.find(id);
  if (it == st.jobs.end()) {
    if (done)
      done({});
    return;
  }
  auto& j = it->second;
  store_write w;
  w.what = store_write::kind::save_job;
  w.job = stored_job{j.report,
                     j.token,
                     j.restore,
                     j.checkpoint_every,
                     j.checkpoint_dir,
                     j.last_checkpoint,
                     j.last_checkpoint_clock};
  w.next_job_id = st.next_job_id;
  send_write(self, std::move(w), std::move(done));
}

void save_next_job_id(cluster_ptr self) {
  store_write w;
  w.what = store_write::kind::save_next_job_id;
  w.next_job_id = self->state.next_job_id;
  send_write(self, std::move(w));
}

void unsave_job(cluster_ptr self, uint32_t id) {
  store_write w;
  w.what = store_write::kind::remove_job;
  w.job_id = id;
  send_write(self, std::move(w));
}

void after_recorded(cluster_ptr self, std::function<void()> fn) {
  auto& st = self->state;
  if (st.writes_done >= st.writes_sent) {
    fn();
    return;
  }
  st.after_writes.emplace_back(st.writes_sent, std::move(fn));
}

uint32_t admit_node_id(cluster_state& st, const std::string& name) {
  auto it = st.awaited.find(name);
  if (it == st.awaited.end())
    return st.next_node_id++;
  auto id = it->second;
  st.awaited.erase(it);
  return id;
}

std::vector<uint32_t> live_jobs_on(const cluster_state& st, uint32_t id) {
  std::vector<uint32_t> out;
  for (auto& [jid, j] : st.jobs)
    if (j.on_node(id) && !is_ended(j.report.state))
      out.push_back(jid);
  return out;
}

namespace {

// The node does not hold job `id` (it restarted while the coordinator was down): a job
// no worker had joined is granted again, with the token its workers hold; a job that
// was running lost its chunks there, and fails.
void regrant_or_fail(cluster_ptr self, uint32_t node_id, uint32_t id,
                     const std::string& node) {
  auto it = self->state.jobs.find(id);
  if (it == self->state.jobs.end() || is_ended(it->second.report.state))
    return;
  auto& j = it->second;
  if (j.report.state != "created") {
    fail_job(self, id,
             fmt::format("node {} no longer holds the job (it restarted while the "
                         "coordinator was down): its chunks are lost",
                         node));
    return;
  }
  auto m = self->state.nodes.find(node_id);
  if (m == self->state.nodes.end())
    return; // gone again: its departure fails the job
  job_grant grant{id, j.report.spec, j.token,
                  j.report.layout}; // tensors if created with them
  grant.max_memory = j.report.max_memory;
  self
    ->request(m->second.link, self->state.settings.node_request_timeout,
              grant_atom::value, grant)
    .then(
      [id, node, name = j.report.name](ok_atom) {
        spdlog::info(
          "job granted again: job='{}' id={} node={}: the node restarted while "
          "the coordinator was down",
          name, id, node);
      },
      [self, id, node](caf::error& err) {
        fail_job(self, id,
                 fmt::format("node {} lost the job and did not take it again: {}", node,
                             describe(self->system(), err)));
      });
}

} // namespace

void reconcile_node(cluster_ptr self, uint32_t node_id) {
  auto& st = self->state;
  auto m = st.nodes.find(node_id);
  if (m == st.nodes.end())
    return;
  auto node = m->second.info.name;
  for (auto id : live_jobs_on(st, node_id)) {
    self
      ->request(m->second.link, st.settings.node_request_timeout, status_atom::value, id)
      .then(
        [self, node_id, node](job_event& ev) {
          auto it = self->state.jobs.find(ev.job_id);
          if (it != self->state.jobs.end())
            spdlog::info("job reconciled: job='{}' id={} node={}: the node has it {}",
                         it->second.report.name, ev.job_id, node, ev.state);
          on_event(self, node_id, ev);
        },
        [self, node_id, node, id](caf::error& err) {
          if (err.category() == caf::atom("rw")
              && static_cast<errc>(err.code()) == errc::unknown_job) {
            regrant_or_fail(self, node_id, id, node);
            return;
          }
          spdlog::warn("job {}: node {} did not say whether it still serves it: {}", id,
                       node, describe(self->system(), err));
        });
  }
}

void expire_awaited(cluster_ptr self) {
  auto& st = self->state;
  if (st.awaited.empty() || steady::now() - st.started <= st.settings.node_timeout)
    return;
  auto awaited = std::move(st.awaited);
  st.awaited.clear();
  for (auto& [name, id] : awaited)
    fail_jobs_on(self, id,
                 fmt::format("node {} did not register again within {} ms of the "
                             "coordinator's restart",
                             name, st.settings.node_timeout.count()));
  retry_placements(self); // none awaited now: placed on who is live, or refused
}

} // namespace rw::actors::detail
