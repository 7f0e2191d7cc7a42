// A job's life on a rack-agg node, as the cluster sees it: the grant that places it
// here, its live status (per-rank counts gathered from the shards), an operator's stop,
// and its end, reported with the final counts before the shards let go of it.

#include <algorithm>
#include <chrono>
#include <functional>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "runtime/kernels.hpp"

namespace rw::actors::detail {

namespace {

// Well inside the cluster's node request timeout, so a slow shard leaves its counts
// out of a status rather than failing it.
constexpr auto shard_stats_timeout = std::chrono::seconds(1);
constexpr size_t max_ended_grants = 1024;

// The job's ranks as they stand, without counts.
std::vector<rank_report> rank_shells(const job_info& job) {
  std::vector<rank_report> out(job.ranks.size());
  for (uint32_t r = 0; r < out.size(); ++r) {
    out[r].rank = r;
    out[r].state = to_string(job.ranks.status(r));
    out[r].peer = job.ranks.peer(r);
  }
  return out;
}

// Adds one shard's counts into the ranks. Clocks: the furthest any shard saw; how late
// a rank comes: the largest any shard measured (merge_lateness). A rack job's shards
// count its ranks in the rack: `global` maps them back.
void add_counts(job_event& ev, const job_counters& counts,
                const std::vector<uint32_t>& global) {
  auto& ranks = ev.ranks;
  for (size_t i = 0; i < counts.size(); ++i) {
    auto r = global.empty() ? i : global.at(i);
    if (r >= ranks.size())
      continue;
    auto& c = counts[i];
    if (c.late_steps != 0 || c.waited_ns != 0)
      merge_lateness(ev.lateness, lateness_of(c, static_cast<uint32_t>(r)));
    auto& x = ranks[r];
    x.clock = std::max(x.clock, c.clock);
    x.pushes += c.pushes;
    x.pulls += c.pulls;
    x.bytes_in += c.bytes_in;
    x.bytes_out += c.bytes_out;
    x.wait_us += c.wait_ns / 1000;
  }
}

// Asks every shard for the job's counts, then calls done(event). Requests go out
// before anything the caller sends the shards next (drop, abort), so they count the
// job as it stood. A shard that does not answer leaves its counts out.
template <class Done>
void gather(rack_ptr self, const job_info& job, job_event ev, Done done) {
  auto& st = self->state;
  ev.ranks = rank_shells(job);
  auto acc = std::make_shared<job_event>(std::move(ev));
  auto pending = std::make_shared<size_t>(st.shards.size());
  auto finish = [acc, pending, done]() mutable {
    if (--*pending == 0)
      done(*acc);
  };
  for (auto& shard : st.shards)
    self->request(shard, shard_stats_timeout, stats_atom::value, job.id)
      .then(
        [acc, finish, global = job.global_rank](job_counters& counts) mutable {
          add_counts(*acc, counts, global);
          finish();
        },
        [acc, finish, id = job.id](caf::error& err) mutable {
          spdlog::warn("job {}: a shard gave no counts: {}", id, to_string(err));
          finish();
        });
}

void remember_end(rack_state& st, const std::string& name, const std::string& state,
                  const std::string& why) {
  auto g = st.grants.find(name);
  if (g == st.grants.end() || !g->second.ended.empty())
    return;
  g->second.ended = state;
  g->second.reason = state == "finished" ? std::string{} : why;
  auto held = std::move(g->second.held_top);
  g->second.held_top.clear();
  for (auto& h : held)
    h.rp.deliver(refuse(errc::unknown_job,
                        fmt::format("job '{}' {} before its ranks were placed{}{}", name,
                                    state, why.empty() ? "" : ": ", why)));
  // One mention per name: an older one (the name was used before) would evict this.
  st.ended_grants.erase(std::remove(st.ended_grants.begin(), st.ended_grants.end(), name),
                        st.ended_grants.end());
  st.ended_grants.push_back(name);
  while (st.ended_grants.size() > max_ended_grants) {
    auto old = st.grants.find(st.ended_grants.front());
    if (old != st.grants.end() && !old->second.ended.empty())
      st.grants.erase(old);
    st.ended_grants.pop_front();
  }
  // A hierarchical job's top level ends with it: new hellos to it are refused, and its
  // grant is let go of like the job's own.
  if (st.grants.count(top_job_name(name)) != 0)
    remember_end(st, top_job_name(name), state, why);
}

// The grant of job `id`: a live one if there is one (ids of ended grants may come
// again from a restarted coordinator), else the newest ended one; null if none.
grant_info* find_grant(rack_state& st, uint32_t id) {
  grant_info* found = nullptr;
  for (auto& [name, g] : st.grants)
    if (g.job_id == id && (found == nullptr || g.ended.empty()))
      found = &g;
  return found;
}

void send_event(rack_ptr self, const job_event& ev) {
  if (ev.job_id >= top_job_id_offset && ev.job_id < open_job_ids)
    return; // a hierarchical job's top level: the cluster hears of the job itself
  if (self->state.link)
    self->send(self->state.link, event_atom::value, ev);
}

// Stops a job's link to other nodes (mirror link, rack uplink) on a thread of its own:
// stopping joins the link's threads, and one of them may be in a connection attempt
// or a send bounded only by the request timeout. On the rack coordinator's thread that
// held every other message: a node whose job had just ended answered the next job's
// grant 3.4 s late, after the cluster had given up on it (bench/failover.sh under a
// CPU hog: "node n0 did not take the job: no answer in time"). (A detached actor: the
// actor system waits for it at shutdown. It takes an argument: CAF 0.17 spawns an
// argument-less function actor through a null tuple pointer.)
caf::behavior link_stopper(caf::event_based_actor* self, std::function<void()> stop,
                           std::string what) {
  auto started = std::chrono::steady_clock::now();
  stop();
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - started);
  if (took >= std::chrono::milliseconds(250))
    spdlog::warn("{} took {} ms to stop (a connection attempt or a send in progress)",
                 what, took.count());
  self->quit();
  return {};
}

template <class Link>
void stop_off_thread(rack_ptr self, std::shared_ptr<Link> link, std::string what) {
  self->system().spawn<caf::detached>(
    link_stopper, std::function<void()>{[link = std::move(link)] { link->stop(); }},
    std::move(what));
}

} // namespace

void report_end(rack_ptr self, job_event ev) {
  auto& st = self->state;
  auto it = st.writing.find(ev.job_id);
  if (it == st.writing.end() || it->second.writing == 0) {
    send_event(self, ev);
    return;
  }
  spdlog::info("job {}: its end goes to the cluster once the {} periodic checkpoint "
               "file(s) being written are",
               ev.job_id, it->second.writing);
  it->second.held.push_back(std::move(ev));
}

void periodic_written(rack_ptr self, uint32_t cluster_id) {
  auto& st = self->state;
  auto it = st.writing.find(cluster_id);
  if (it == st.writing.end() || --it->second.writing > 0)
    return;
  auto held = std::move(it->second.held);
  st.writing.erase(it);
  for (auto& ev : held)
    send_event(self, ev);
}

caf::result<ok_atom> on_grant(rack_ptr self, job_grant& g) {
  auto& st = self->state;
  auto& name = g.spec.name;
  auto live = st.jobs.find(name);
  if (live != st.jobs.end() && !live->second.granted)
    return cluster_error(
      errc::duplicate_name,
      fmt::format("node {} runs an open job named '{}'", st.settings.node_name, name));
  auto old = st.grants.find(name);
  if (old != st.grants.end() && old->second.ended.empty())
    return cluster_error(
      errc::duplicate_name,
      fmt::format("node {} has a live job named '{}'", st.settings.node_name, name));
  if (g.layout.nodes.size() > 1
      && std::find(g.layout.nodes.begin(), g.layout.nodes.end(), st.settings.node_name)
           == g.layout.nodes.end())
    return cluster_error(
      errc::invalid_spec,
      fmt::format("job '{}' was granted to node {}, which is not among "
                  "its nodes [{}]",
                  name, st.settings.node_name, fmt::join(g.layout.nodes, ",")));
  spdlog::info("job granted: job='{}' id={} workers={} consistency={} optimizer={} "
               "chunk_bytes={} nodes=[{}] reduction={} ring_version={}: waiting for its "
               "workers",
               name, g.job_id, g.spec.num_workers, to_string(g.spec.consistency),
               to_string(g.spec.optimizer.kind), g.spec.chunk_bytes,
               fmt::join(g.layout.nodes, ","), g.layout.reduction, g.layout.ring_version);
  // The coordinator resolved the paths under its root; this node writes and reads only
  // under its own.
  try {
    auto& root = st.settings.checkpoint_root;
    if (!g.restore.empty())
      g.restore = root.resolve(g.restore,
                               fmt::format("node {}: restore", st.settings.node_name));
    if (!g.checkpoint_dir.empty())
      g.checkpoint_dir = root.resolve(
        g.checkpoint_dir, fmt::format("node {}: checkpoint_dir", st.settings.node_name));
  } catch (const runtime::checkpoint::checkpoint_error& e) {
    spdlog::warn("job refused: job='{}' id={}: {}", name, g.job_id, e.what());
    return cluster_error(errc::invalid_spec, e.what());
  }
  if (g.joining && (is_hierarchical(g.layout) || g.spec.tensors.empty()))
    return cluster_error(
      errc::invalid_spec,
      fmt::format("node {} cannot join job '{}': only a flat job whose "
                  "tensors are known moves onto a node",
                  st.settings.node_name, name));
  st.grants[name] = grant_info{
    g.job_id, g.spec,    g.secret,           g.layout,        {}, {}, false, 0,
    {},       g.restore, g.checkpoint_every, g.checkpoint_dir};
  st.grants[name].joining = g.joining;
  st.grants[name].max_memory = g.max_memory;
  if (is_hierarchical(g.layout)) {
    // The top level the rack-aggs take part in: one rank per rack, the job's
    // optimizer (its gradient scale fixed for all the job's workers), chunks homed
    // over the nodes as in a flat job. Every node derives the same grant.
    auto top = g.spec;
    top.name = top_job_name(name);
    top.num_workers = static_cast<uint32_t>(g.layout.nodes.size());
    top.optimizer.rescale = runtime::effective_rescale(g.spec.optimizer,
                                                       g.spec.num_workers);
    // Compression is the workers' hop: the racks' partial sums and the homes' answers
    // cross the core as float32 (the rack-aggs widen what their workers send).
    top.compression = {};
    auto layout = g.layout;
    layout.reduction = "flat";
    layout.rank_racks.clear();
    // The state lives at the chunks' homes in the top level: its checkpoints are the
    // job's, and a restored job's top level starts from the checkpoint (each node the
    // chunks it homes, with their optimizer state).
    grant_info t{g.job_id + top_job_id_offset,
                 top,
                 g.secret,
                 layout,
                 {},
                 {},
                 false,
                 0,
                 {},
                 g.restore,
                 g.checkpoint_every,
                 g.checkpoint_dir};
    t.internal = true;
    t.init_rank = g.layout.rank_racks.empty() ? 0 : g.layout.rank_racks.front();
    st.grants[top.name] = std::move(t);
  }
  return ok_atom::value;
}

caf::result<job_event> on_status(rack_ptr self, uint32_t job_id) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n != st.names.end()) {
    auto& job = st.jobs.at(n->second);
    auto rp = self->make_response_promise<job_event>();
    gather(self, job, job_event{job_id, "running", {}, job.spec, {}},
           [rp](job_event& ev) mutable { rp.deliver(std::move(ev)); });
    return rp;
  }
  // Ended here, its end held until its periodic checkpoint files are written
  // (report_end): to the cluster it runs until then.
  if (auto w = st.writing.find(job_id);
      w != st.writing.end() && !w->second.held.empty()) {
    auto ev = w->second.held.back();
    ev.state = "running";
    ev.reason.clear();
    return ev;
  }
  if (auto* g = find_grant(st, job_id))
    return job_event{
      job_id, g->ended.empty() ? "created" : g->ended, g->reason, g->spec, {}};
  return cluster_error(errc::unknown_job, fmt::format("node {} has no job {}",
                                                      st.settings.node_name, job_id));
}

caf::result<ok_atom> on_halt(rack_ptr self, uint32_t job_id, const std::string& reason,
                             bool failed) {
  auto& st = self->state;
  const std::string state = failed ? "failed" : "stopped";
  if (st.names.count(job_id) != 0) {
    end_job(self, job_id, state, failed ? errc::unavailable : errc::stopped, reason);
    return ok_atom::value;
  }
  if (auto* g = find_grant(st, job_id)) {
    if (g->ended.empty()) {
      auto name = g->spec.name;
      auto spec = g->spec;
      spdlog::info("job {}: job='{}' id={} before any worker joined: {}", state, name,
                   job_id, reason);
      remember_end(st, name, state, reason);
      send_event(self, job_event{job_id, state, reason, spec, {}, {}});
    }
    return ok_atom::value;
  }
  return cluster_error(errc::unknown_job, fmt::format("node {} has no job {}",
                                                      st.settings.node_name, job_id));
}

void on_halt_all(rack_ptr self, const std::vector<uint32_t>& keep,
                 const std::string& reason) {
  auto& st = self->state;
  // A hierarchical job's top level is kept or failed with its job.
  auto kept = [&keep](uint32_t id) {
    if (id >= top_job_id_offset && id < open_job_ids)
      id -= top_job_id_offset;
    return std::find(keep.begin(), keep.end(), id) != keep.end();
  };
  std::vector<uint32_t> live;
  for (auto& [id, name] : st.names)
    if (st.jobs.at(name).granted && !kept(id))
      live.push_back(id);
  for (auto id : live)
    end_job(self, id, "failed", errc::unavailable, reason);
  std::vector<std::string> waiting;
  for (auto& [name, g] : st.grants)
    if (g.ended.empty() && !kept(g.job_id))
      waiting.push_back(name);
  for (auto& name : waiting) {
    spdlog::warn("job failed: job='{}' id={} before any worker joined: {}", name,
                 st.grants[name].job_id, reason);
    remember_end(st, name, "failed", reason);
  }
}

void report_start(rack_ptr self, const job_info& job) {
  send_event(self, job_event{job.id, "running", {}, job.spec, rank_shells(job), {}});
}

void end_job(rack_ptr self, uint32_t job_id, const std::string& state, errc code,
             const std::string& why) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return;
  auto& job = st.jobs.at(n->second);
  // An open job's end is logged here only; a granted one's transition is the cluster
  // coordinator's to log (once), and this line is about this node's part of it.
  auto what = job.granted ? fmt::format("job ended on this node: state={}", state)
                          : fmt::format("job {}", state);
  auto level = state == "finished"  ? spdlog::level::info
               : state == "stopped" ? spdlog::level::warn
                                    : spdlog::level::err;
  if (state == "finished" || state == "stopped")
    spdlog::log(level, "{}: job='{}' id={}: {}", what, job.spec.name, job_id, why);
  else
    spdlog::log(level, "{}: job='{}' id={}: {} ({})", what, job.spec.name, job_id, why,
                to_string(code));
  if (job.granted) {
    remember_end(st, job.spec.name, state, why);
    gather(self, job,
           job_event{job_id, state, state == "finished" ? "" : why, job.spec, {}, {}},
           [self](job_event& ev) { report_end(self, std::move(ev)); });
  }
  for (auto& s : st.shards) {
    if (state == "finished")
      self->send(s, drop_atom::value, job_id);
    else
      self->send(s, abort_atom::value, job_id, code, why);
  }
  if (job.uplink) // leaves the top level: its other participants see the rack go
    stop_off_thread(self, std::move(job.uplink),
                    fmt::format("job {}'s uplink to its top level", job_id));
  if (job.mirror)
    stop_off_thread(self, std::move(job.mirror),
                    fmt::format("job {}'s mirror link", job_id));
  st.jobs.erase(n->second);
  st.names.erase(n);
}

void let_go(rack_ptr self, uint32_t job_id, const std::string& why) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end()) {
    // Granted to join, never live here (the move onto this node was given up).
    if (auto* g = find_grant(st, job_id); g != nullptr && g->ended.empty()) {
      spdlog::info("job not joined: job='{}' id={}: {}", g->spec.name, job_id, why);
      remember_end(st, g->spec.name, "moved", why);
    }
    return;
  }
  auto name = n->second;
  spdlog::info("job moved away: job='{}' id={}: {}", name, job_id, why);
  remember_end(st, name, "moved", why);
  // Frames for it still on their way (routed by the ring it left) are dropped
  // unanswered: their workers send them again by the new ring.
  for (auto& s : st.shards)
    self->send(s, drop_atom::value, job_id, errc::moved,
               fmt::format("job {} moved away from node {}: {}", job_id,
                           st.settings.node_name, why));
  if (auto j = st.jobs.find(name); j != st.jobs.end() && j->second.mirror)
    stop_off_thread(self, std::move(j->second.mirror),
                    fmt::format("job {}'s mirror link", job_id));
  st.jobs.erase(name);
  st.names.erase(n);
}

} // namespace rw::actors::detail
