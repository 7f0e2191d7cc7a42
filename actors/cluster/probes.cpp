// Measuring core links for `reduction = "auto"`, in the spirit of PLink's probing:
// where a node of an auto job over several racks has no configured core rate, the
// coordinator asks it to probe the next node of the job's ring (probe_atom: a burst
// over the data plane, actors/links/rate_prober) and plans with the measured rate. Results
// are kept per node pair, so creating many jobs does not probe each time; a probe
// that fails or does not answer in time leaves the node's core rate unknown, and the
// plan falls back to the equal-links rule and says why.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

namespace {

bool fresh(const core_probe& p, steady::time_point now) {
  auto keep = std::chrono::milliseconds(p.ok ? defaults::probe_cache_ms
                                             : defaults::probe_retry_ms);
  return now - p.when < keep;
}

// Runs one probe from `from` to `to`, then tells everyone waiting for the pair.
void start_probe(cluster_ptr self, const member& from, const member& to, node_pair key,
                 const std::string& job) {
  rate_probe_request req;
  req.target = to.info.name;
  req.address = to.info.endpoints.front();
  auto wait = std::chrono::milliseconds(req.timeout_ms)
              + self->state.settings.node_request_timeout;
  core_probe base;
  base.from = from.info.name;
  base.to = to.info.name;
  auto finish = [self, key, job](core_probe p) {
    p.when = steady::now();
    if (p.ok)
      spdlog::info("rate probe: {}->{} {:.3f} Gbit/s in {:.1f} ms (for job='{}')", p.from,
                   p.to, p.gbps, p.elapsed_us / 1e3, job);
    else
      spdlog::warn("rate probe: {}->{} failed (for job='{}'): {}", p.from, p.to, job,
                   p.error);
    auto& st = self->state;
    if (st.nodes.count(key.first) != 0 && st.nodes.count(key.second) != 0)
      st.probe_cache[key] = p;
    auto waiters = std::move(st.probing[key]);
    st.probing.erase(key);
    for (auto& w : waiters)
      w(p);
  };
  self->request(from.link, wait, probe_atom::value, std::move(req))
    .then(
      [finish, base](rate_probe_result& r) mutable {
        base.ok = r.ok && r.gbps > 0;
        base.gbps = r.gbps;
        base.elapsed_us = r.elapsed_us;
        base.error = r.ok ? (r.gbps > 0 ? "" : "it measured no throughput") : r.error;
        finish(base);
      },
      [self, finish, base](caf::error& err) mutable {
        base.error = fmt::format("{} did not report it: {}", base.from,
                                 describe(self->system(), err));
        finish(base);
      });
}

} // namespace

bool wants_core_probes(const job_spec& spec, const job_placement& p,
                       const std::vector<const member*>& nodes) {
  if (p.reduction != "auto" || nodes.size() < 2
      || !hierarchical_refusal(spec, nodes).empty())
    return false;
  return std::any_of(nodes.begin(), nodes.end(),
                     [](const member* m) { return m->info.core_gbps <= 0; });
}

void probe_core_links(cluster_ptr self, const std::vector<const member*>& nodes,
                      const std::string& job, std::function<void(core_probes)> done) {
  struct acc_t {
    core_probes out;
    size_t pending = 0;
    std::function<void(core_probes)> done;
  };
  auto acc = std::make_shared<acc_t>();
  acc->done = std::move(done);
  // Each node without a configured core rate probes its successor; a pair is probed
  // once, whichever of its nodes asks.
  std::map<node_pair, std::pair<const member*, const member*>> pairs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i]->info.core_gbps > 0)
      continue;
    auto* from = nodes[i];
    auto* to = nodes[(i + 1) % nodes.size()];
    node_pair key{std::min(from->info.id, to->info.id),
                  std::max(from->info.id, to->info.id)};
    pairs.emplace(key, std::make_pair(from, to));
  }
  acc->pending = pairs.size() + 1; // + 1: until every probe is under way
  auto arrived = [acc](node_pair key) {
    return [acc, key](const core_probe& p) {
      acc->out[key.first].push_back(p);
      acc->out[key.second].push_back(p);
      if (--acc->pending == 0)
        acc->done(std::move(acc->out));
    };
  };
  auto& st = self->state;
  auto now = steady::now();
  for (auto& [key, ends] : pairs) {
    auto cached = st.probe_cache.find(key);
    if (cached != st.probe_cache.end() && fresh(cached->second, now)) {
      arrived(key)(cached->second);
      continue;
    }
    auto& waiting = st.probing[key];
    waiting.push_back(arrived(key));
    if (waiting.size() == 1)
      start_probe(self, *ends.first, *ends.second, key, job);
  }
  if (--acc->pending == 0)
    acc->done(std::move(acc->out));
}

void forget_probes(cluster_state& st, uint32_t node_id) {
  for (auto it = st.probe_cache.begin(); it != st.probe_cache.end();)
    if (it->first.first == node_id || it->first.second == node_id)
      it = st.probe_cache.erase(it);
    else
      ++it;
}

} // namespace rw::actors::detail
