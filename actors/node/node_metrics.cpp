#include "actors/node/node_metrics.hpp"

#include <algorithm>
#include <map>
#include <string>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/cluster_messages.hpp"
#include "actors/node/coordinator_node.hpp"
#include "actors/node/rack_agg_node.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/prometheus.hpp"

namespace rw::actors {

namespace {

namespace prom = runtime::prometheus;

// Ranks per job in rw_job_rank_late_seconds: the slowest (a bounded label set).
constexpr size_t max_late_ranks = 4;
using prom::kind;

// Asks `who` for `msg...` and waits for the answer; nullopt (and one more missing
// answer) if none comes in time.
template <class T, class Handle, class... Ts>
std::optional<T> ask(caf::scoped_actor& self, const Handle& who, int& missing,
                     Ts&&... msg) {
  std::optional<T> out;
  if (!who) {
    ++missing;
    return out;
  }
  self->request(who, metrics_answer_timeout, std::forward<Ts>(msg)...)
    .receive([&](T& x) { out = std::move(x); }, [&](caf::error&) { ++missing; });
  return out;
}

void process_metrics(prom::writer& w, const std::string& node_name,
                     const std::string& role) {
  auto p = runtime::read_process_stats();
  w.family("rw_node_info", kind::gauge,
           "the node: its name, role and version (always 1)");
  w.sample({{"node", node_name}, {"role", role}, {"version", RW_VERSION}}, 1);
  // The process_* names every Prometheus client library exports for its process, so
  // dashboards and alerts written for them work unchanged.
  w.family("process_resident_memory_bytes", kind::gauge, "resident memory of rw-node");
  w.sample({}, static_cast<double>(p.rss_bytes));
  w.family("process_open_fds", kind::gauge, "open file descriptors of rw-node");
  w.sample({}, static_cast<double>(p.open_fds));
  w.family("process_max_fds", kind::gauge, "rw-node's limit on open file descriptors");
  w.sample({}, static_cast<double>(p.max_fds));
  w.family("process_threads", kind::gauge, "threads of rw-node");
  w.sample({}, static_cast<double>(p.threads));
  w.family("process_cpu_seconds_total", kind::counter,
           "CPU time rw-node used (user and system, every thread)");
  w.sample({}, p.cpu_seconds);
}

void shard_metrics(prom::writer& w, caf::scoped_actor& self,
                   const std::vector<chunk_shard_actor>& handles, int& missing) {
  std::vector<std::pair<std::string, shard_stats>> shards;
  for (size_t i = 0; i < handles.size(); ++i)
    if (auto s = ask<shard_stats>(self, handles[i], missing, stats_atom::value))
      shards.emplace_back(std::to_string(i), std::move(*s));
  auto each = [&](const char* name, kind k, const char* help, auto field) {
    w.family(name, k, help);
    for (auto& [index, s] : shards)
      w.sample({{"shard", index}}, static_cast<double>(field(s)));
  };
  each("rw_shard_bytes_in_total", kind::counter, "gradient bytes pushed to the shard",
       [](const shard_stats& s) { return s.bytes_in; });
  each("rw_shard_bytes_out_total", kind::counter, "update bytes the shard sent",
       [](const shard_stats& s) { return s.bytes_out; });
  each("rw_shard_chunks_summed_total", kind::counter,
       "chunk gradients the shard summed (pushes counted; a re-sent one is not)",
       [](const shard_stats& s) { return s.pushes - std::min(s.pushes, s.duplicates); });
  each("rw_shard_duplicate_pushes_total", kind::counter,
       "pushes dropped as already counted (a worker's re-send)",
       [](const shard_stats& s) { return s.duplicates; });
  each("rw_shard_optimizer_steps_total", kind::counter,
       "chunk steps the shard completed (optimizer runs, or updates applied)",
       [](const shard_stats& s) { return s.updates; });
  each("rw_shard_chunks", kind::gauge, "chunks the shard holds now",
       [](const shard_stats& s) { return s.chunks; });
  each("rw_shard_queue_depth", kind::gauge,
       "pushes waiting in the shard's backlog (served lowest clock first)",
       [](const shard_stats& s) { return s.queued; });
  w.family("rw_shard_busy_seconds_total", kind::counter,
           "CPU time of the shard's thread (its busy fraction: the rate of this)");
  for (auto& [index, s] : shards)
    w.sample({{"shard", index}}, static_cast<double>(s.busy_ns) / 1e9);
}

void endpoint_metrics(prom::writer& w, caf::scoped_actor& self, const rack_agg_node& node,
                      int& missing) {
  std::vector<poller_stats> pollers;
  auto add = [&](const nic_poller_actor& p) {
    if (auto s = ask<poller_stats>(self, p, missing, stats_atom::value))
      pollers.push_back(std::move(*s));
  };
  for (auto& p : node.pollers())
    add(p);
  if (node.shm_poller())
    add(node.shm_poller());
  for (auto& p : node.fabric_pollers())
    add(p);
  auto each = [&](const char* name, kind k, const char* help, auto field) {
    w.family(name, k, help);
    for (auto& s : pollers)
      w.sample({{"endpoint", s.endpoint}}, static_cast<double>(field(s)));
  };
  each("rw_endpoint_connections", kind::gauge, "connections open on the endpoint",
       [](const poller_stats& s) { return s.connections; });
  each("rw_endpoint_frames_in_total", kind::counter, "frames read on the endpoint",
       [](const poller_stats& s) { return s.frames_in; });
  each("rw_endpoint_bytes_in_total", kind::counter,
       "bytes read on the endpoint (frame headers and payloads)",
       [](const poller_stats& s) { return s.bytes_in; });
  each("rw_endpoint_refused_frames_total", kind::counter,
       "frames the endpoint refused (answered with an error frame)",
       [](const poller_stats& s) { return s.refused; });
}

void job_metrics(prom::writer& w, caf::scoped_actor& self, const node_gauges& node,
                 int& missing) {
  const auto& gauges = node.jobs;
  // Per rank, over the shards: the highest clock it pushed (+1) and its bytes.
  struct ranks_seen {
    uint32_t waiting = 0;
    uint64_t bytes_in = 0, bytes_out = 0;
    std::vector<rank_lateness> late; // by rank, over the shards
  };
  std::vector<ranks_seen> seen(gauges.size());
  for (size_t j = 0; j < gauges.size(); ++j) {
    job_counters merged;
    for (auto& shard : node.shards) {
      auto part = ask<job_counters>(self, shard, missing, stats_atom::value,
                                    gauges[j].id);
      if (!part)
        continue;
      if (merged.size() < part->size())
        merged.resize(part->size());
      const auto& global = gauges[j].global_rank; // a rack job's shards count its ranks
      for (size_t r = 0; r < part->size(); ++r) {
        auto& c = (*part)[r];
        auto rank = static_cast<uint32_t>(r < global.size() ? global[r] : r);
        merged[r].clock = std::max(merged[r].clock, c.clock);
        seen[j].bytes_in += c.bytes_in;
        seen[j].bytes_out += c.bytes_out;
        if (c.late_steps != 0 || c.waited_ns != 0)
          merge_lateness(seen[j].late, lateness_of(c, rank));
      }
    }
    // A rank that pushed the step in progress (clock + 1 steps) waits for the others.
    for (auto& r : merged)
      seen[j].waiting += r.clock > gauges[j].clock;
  }
  auto each = [&](const char* name, kind k, const char* help, auto field) {
    w.family(name, k, help);
    for (size_t j = 0; j < gauges.size(); ++j)
      w.sample({{"rw_job", gauges[j].name}},
               static_cast<double>(field(gauges[j], seen[j])));
  };
  each("rw_job_clock", kind::gauge, "steps every chunk of the job on this node completed",
       [](const job_gauge& g, const ranks_seen&) { return g.clock; });
  each("rw_job_ranks", kind::gauge, "the job's workers (this rack's, when hierarchical)",
       [](const job_gauge& g, const ranks_seen&) { return g.ranks; });
  each("rw_job_live_ranks", kind::gauge, "of them, connected now",
       [](const job_gauge& g, const ranks_seen&) { return g.live; });
  each("rw_job_away_ranks", kind::gauge,
       "of them, gone without bye and inside their rejoin window",
       [](const job_gauge& g, const ranks_seen&) { return g.away; });
  each("rw_job_waiting_ranks", kind::gauge,
       "ranks that pushed the step in progress and wait for the others",
       [](const job_gauge&, const ranks_seen& s) { return s.waiting; });
  each("rw_job_bytes_in_total", kind::counter,
       "gradient bytes the job's workers pushed here",
       [](const job_gauge&, const ranks_seen& s) { return s.bytes_in; });
  each("rw_job_bytes_out_total", kind::counter, "update bytes sent to the job's workers",
       [](const job_gauge&, const ranks_seen& s) { return s.bytes_out; });
  w.family("rw_job_step_seconds", kind::histogram,
           "time between two successive clocks of the job on this node");
  for (auto& g : gauges)
    w.histogram({{"rw_job", g.name}}, g.steps);
  // Stragglers, with a bounded label set: per job, its slowest ranks only.
  w.family("rw_job_rank_late_seconds", kind::gauge,
           "BSP: how long after the first rank's last chunk of a step this rank's last "
           "chunk arrived, the mean of its last 8 steps; the job's 4 slowest ranks only");
  for (size_t j = 0; j < gauges.size(); ++j) {
    auto late = seen[j].late;
    std::sort(
      late.begin(), late.end(), [](const rank_lateness& a, const rank_lateness& b) {
        return a.recent_us != b.recent_us ? a.recent_us > b.recent_us : a.rank < b.rank;
      });
    late.resize(std::min<size_t>(late.size(), max_late_ranks));
    for (auto& l : late)
      w.sample({{"rw_job", gauges[j].name}, {"rank", std::to_string(l.rank)}},
               static_cast<double>(l.recent_us) / 1e6);
  }
  each("rw_job_slow_step_seconds", kind::gauge,
       "how long the job's oldest step here past --slow-step-ms has waited (0: none)",
       [](const job_gauge&, const ranks_seen& s) {
         uint64_t ms = 0;
         for (auto& l : s.late)
           ms = std::max(ms, l.waited_ms);
         return static_cast<double>(ms) / 1e3;
       });
  each("rw_job_slow_step_ranks", kind::gauge,
       "ranks a step here has waited for longer than --slow-step-ms",
       [](const job_gauge&, const ranks_seen& s) {
         return std::count_if(s.late.begin(), s.late.end(),
                              [](const rank_lateness& l) { return l.waited_ms != 0; });
       });
}

void cluster_metrics(prom::writer& w, caf::scoped_actor& self, const coordinator_node& c,
                     int& missing) {
  auto nodes = ask<std::vector<node_info>>(self, c.actor(), missing, caf::get_atom::value,
                                           nodes_atom::value);
  auto jobs = ask<std::vector<job_report>>(self, c.actor(), missing, caf::get_atom::value,
                                           jobs_atom::value);
  w.family("rw_cluster_nodes", kind::gauge, "nodes registered with the coordinator");
  if (nodes)
    w.sample({}, static_cast<double>(nodes->size()));
  w.family("rw_cluster_jobs", kind::gauge, "the coordinator's jobs, by state");
  if (jobs) {
    std::map<std::string, uint64_t> by_state{
      {"created", 0}, {"running", 0}, {"finished", 0}, {"failed", 0}, {"stopped", 0}};
    for (auto& j : *jobs)
      ++by_state[j.state];
    for (auto& [state, n] : by_state)
      w.sample({{"state", state}}, static_cast<double>(n));
  }
}

} // namespace

std::string render_metrics(caf::actor_system& sys, const std::string& node_name,
                           const std::string& role, const rack_agg_node* node,
                           const coordinator_node* cluster) {
  prom::writer w;
  caf::scoped_actor self{sys};
  int missing = 0;
  process_metrics(w, node_name, role);
  if (node) {
    // The shards as they are now: the rack coordinator follows their restarts.
    auto gauges = ask<node_gauges>(self, node->rack(), missing, metrics_atom::value);
    if (!gauges)
      gauges = node_gauges{{}, node->shards()};
    shard_metrics(w, self, gauges->shards, missing);
    endpoint_metrics(w, self, *node, missing);
    job_metrics(w, self, *gauges, missing);
  }
  if (cluster)
    cluster_metrics(w, self, *cluster, missing);
  w.family("rw_metrics_missing_answers", kind::gauge,
           "actors that did not answer this scrape in time (their metrics are left out)");
  w.sample({}, missing);
  return w.text();
}

node_totals read_totals(caf::actor_system& sys, const rack_agg_node& node) {
  caf::scoped_actor self{sys};
  int missing = 0;
  node_totals t;
  auto gauges = ask<node_gauges>(self, node.rack(), missing, metrics_atom::value);
  for (auto& shard : gauges ? gauges->shards : node.shards())
    if (auto s = ask<shard_stats>(self, shard, missing, stats_atom::value)) {
      t.bytes_in += s->bytes_in;
      t.bytes_out += s->bytes_out;
      t.steps += s->updates;
    }
  auto count = [&](const nic_poller_actor& p) {
    if (auto s = ask<poller_stats>(self, p, missing, stats_atom::value))
      t.connections += s->connections;
  };
  for (auto& p : node.pollers())
    count(p);
  if (node.shm_poller())
    count(node.shm_poller());
  for (auto& p : node.fabric_pollers())
    count(p);
  if (gauges)
    t.jobs = gauges->jobs.size();
  t.missing = static_cast<uint64_t>(missing);
  return t;
}

std::string throughput_line(const node_totals& before, const node_totals& now,
                            double seconds) {
  auto rate = [&](uint64_t a, uint64_t b) {
    // A shard restarted by its supervisor starts its counters again.
    return b >= a && seconds > 0 ? static_cast<double>(b - a) / seconds : 0.0;
  };
  auto mib = 1024.0 * 1024.0;
  auto line = fmt::format(
    "throughput over {:.0f} s: in {:.1f} MiB/s, out {:.1f} MiB/s, {:.0f} chunk steps/s; "
    "{} connections, {} live jobs, RSS {:.0f} MiB",
    seconds, rate(before.bytes_in, now.bytes_in) / mib,
    rate(before.bytes_out, now.bytes_out) / mib, rate(before.steps, now.steps),
    now.connections, now.jobs,
    static_cast<double>(runtime::read_process_stats().rss_bytes) / mib);
  if (now.missing > 0)
    line += fmt::format(" ({} actors did not answer in time: their counts are left out)",
                        now.missing);
  return line;
}

std::string not_ready(caf::actor_system& sys, const rack_agg_node* node,
                      const coordinator_node* cluster) {
  caf::scoped_actor self{sys};
  int missing = 0;
  if (node) {
    for (auto& p : node->pollers())
      if (!ask<poller_stats>(self, p, missing, stats_atom::value))
        return "an endpoint's poller does not answer";
    auto registered = ask<bool>(self, node->link(), missing, metrics_atom::value);
    if (!registered)
      return "the cluster link does not answer";
    if (!*registered)
      return "not registered with the cluster coordinator yet";
  }
  if (cluster
      && !ask<std::vector<node_info>>(self, cluster->actor(), missing,
                                      caf::get_atom::value, nodes_atom::value))
    return "the cluster coordinator does not answer";
  return {};
}

} // namespace rw::actors
