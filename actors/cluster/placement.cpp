// Where a new job goes: the nodes a placement names (one node, several, or every node
// of some racks; else the least-loaded live node), in ring order, and how the job
// reduces across them.

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"
#include "actors/cluster/link_plan.hpp"

namespace rw::actors::detail {

namespace {

std::string live_names(const cluster_state& st) {
  std::vector<std::string> names;
  for (auto& [id, m] : st.nodes)
    names.push_back(fmt::format("{} (rack {})", m.info.name, m.info.rack));
  return fmt::format("{}", fmt::join(names, ", "));
}

const member* by_name(const cluster_state& st, const std::string& name) {
  for (auto& [id, m] : st.nodes)
    if (m.info.name == name)
      return &m;
  return nullptr;
}

} // namespace

std::vector<const member*> place_job(const cluster_state& st, const job_placement& p,
                                     std::string& why) {
  std::vector<const member*> out;
  if (st.nodes.empty()) {
    why = "no rack-agg node is live in the cluster";
    return out;
  }
  int ways = !p.node.empty() + !p.nodes.empty() + !p.racks.empty();
  if (ways > 1) {
    why = "give one of node, nodes and racks, not several";
    return out;
  }
  if (!p.node.empty() || !p.nodes.empty()) {
    auto names = p.nodes.empty() ? std::vector<std::string>{p.node} : p.nodes;
    std::set<std::string> seen;
    for (auto& n : names) {
      if (!seen.insert(n).second) {
        why = fmt::format("node '{}' is named twice", n);
        return {};
      }
      auto* m = by_name(st, n);
      if (m == nullptr) {
        why = fmt::format("no live node is named '{}' (live nodes: {})", n,
                          live_names(st));
        return {};
      }
      if (m->drained) {
        why = fmt::format("node '{}' was drained (rw.node_drain): it takes no new jobs",
                          n);
        return {};
      }
      out.push_back(m);
    }
  } else if (!p.racks.empty()) {
    std::set<std::string> seen;
    for (auto& r : p.racks) {
      if (!seen.insert(r).second) {
        why = fmt::format("rack '{}' is named twice", r);
        return {};
      }
      size_t before = out.size();
      for (auto& [id, m] : st.nodes)
        if (m.info.rack == r && !m.drained)
          out.push_back(&m);
      if (out.size() == before) {
        why = fmt::format("rack '{}' has no live rack-agg node (live nodes: {})", r,
                          live_names(st));
        return {};
      }
    }
  } else {
    const member* best = nullptr;
    uint32_t best_load = UINT32_MAX;
    for (auto& [id, m] : st.nodes) {
      if (m.drained)
        continue;
      auto load = static_cast<uint32_t>(live_jobs_on(st, id).size());
      if (load < best_load) {
        best = &m;
        best_load = load;
      }
    }
    if (best == nullptr) {
      why = "every live node was drained (rw.node_drain)";
      return {};
    }
    out.push_back(best);
  }
  // Ring order, which is also the documented order racks are summed in: by rack,
  // then by node name.
  std::sort(out.begin(), out.end(), [](const member* a, const member* b) {
    return std::tie(a->info.rack, a->info.name) < std::tie(b->info.rack, b->info.name);
  });
  return out;
}

std::string hierarchical_refusal(const job_spec& spec,
                                 const std::vector<const member*>& nodes) {
  if (nodes.size() < 2)
    return "it needs two racks or more";
  if (spec.consistency.model != consistency_spec::bsp)
    return fmt::format("it is BSP-only and the job asks for {}",
                       to_string(spec.consistency));
  std::set<std::string> racks;
  for (auto* m : nodes)
    if (!racks.insert(m->info.rack).second)
      return fmt::format(
        "it takes one rack-agg per rack, and rack '{}' has several among "
        "the job's nodes",
        m->info.rack);
  if (top_job_name(spec.name).size() > 128)
    return "its top level's name (the job's + \"/top\") would pass 128 characters";
  if (spec.num_workers < nodes.size())
    return fmt::format("{} workers cannot fill {} racks", spec.num_workers, nodes.size());
  return {};
}

namespace {

// Each rank's node: as the placement's worker racks say, or equal contiguous blocks in
// rack order. Empty with `why` set on a bad list.
std::vector<uint32_t> assign_ranks(const job_spec& spec, const job_placement& p,
                                   const std::vector<const member*>& nodes,
                                   std::string& why) {
  std::vector<uint32_t> out(spec.num_workers);
  auto n = static_cast<uint32_t>(nodes.size());
  if (p.worker_racks.empty()) {
    for (uint32_t r = 0; r < spec.num_workers; ++r)
      out[r] = static_cast<uint32_t>(uint64_t{r} * n / spec.num_workers);
    return out;
  }
  if (p.worker_racks.size() != spec.num_workers) {
    why = fmt::format("worker_racks names {} racks for {} workers: give one per rank",
                      p.worker_racks.size(), spec.num_workers);
    return {};
  }
  std::vector<bool> used(n, false);
  for (uint32_t r = 0; r < spec.num_workers; ++r) {
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const member* m) {
      return m->info.rack == p.worker_racks[r];
    });
    if (it == nodes.end()) {
      why = fmt::format("rank {}'s rack '{}' has no node in the job", r,
                        p.worker_racks[r]);
      return {};
    }
    out[r] = static_cast<uint32_t>(it - nodes.begin());
    used[out[r]] = true;
  }
  for (uint32_t k = 0; k < n; ++k)
    if (!used[k]) {
      why = fmt::format("rack '{}' is in the job but none of its workers is",
                        nodes[k]->info.rack);
      return {};
    }
  return out;
}

} // namespace

bool choose_reduction(const job_spec& spec, const job_placement& p,
                      const std::vector<const member*>& nodes, const core_probes& probes,
                      job_layout& layout, std::string& why) {
  if (p.reduction != "auto" && p.reduction != "flat" && p.reduction != "hierarchical") {
    why = fmt::format("reduction must be auto, flat or hierarchical, not '{}'",
                      p.reduction);
    return false;
  }
  if (p.join_timeout_ms > defaults::max_join_timeout_ms) {
    why = fmt::format("join_timeout_ms {} is over the most allowed, {}",
                      p.join_timeout_ms, defaults::max_join_timeout_ms);
    return false;
  }
  auto refusal = hierarchical_refusal(spec, nodes);
  if (p.reduction == "hierarchical" && !refusal.empty()) {
    why = "hierarchical reduction cannot run this job: " + refusal;
    return false;
  }
  if (!p.worker_racks.empty() && p.reduction == "flat") {
    why =
      "worker_racks places a hierarchical job's workers; a flat job's workers talk to "
      "every node";
    return false;
  }
  std::vector<uint32_t> ranks;
  if (refusal.empty()) {
    ranks = assign_ranks(spec, p, nodes, why);
    if (ranks.empty())
      return false;
  }
  if (p.reduction == "flat" || (p.reduction == "auto" && !refusal.empty())) {
    layout.reduction = "flat";
    layout.plan = p.reduction == "flat"
                    ? "flat, as asked"
                    : (nodes.size() > 1
                         ? "auto: flat, since hierarchical cannot run it: " + refusal
                         : "auto: one node");
    return true;
  }
  // Without worker_racks the estimate counts equal contiguous blocks; the ranks
  // themselves are placed as their workers say hello (each at its nearest agg).
  auto t = estimate(spec, ranks, nodes, probes);
  bool hier = p.reduction == "hierarchical" || t.hierarchical <= t.flat;
  layout.reduction = hier ? "hierarchical" : "flat";
  bool at_join = hier && p.worker_racks.empty();
  layout.rank_racks = hier && !at_join ? ranks : std::vector<uint32_t>{};
  layout.join_timeout_ms = at_join ? (p.join_timeout_ms != 0 ? p.join_timeout_ms
                                                             : defaults::join_timeout_ms)
                                   : 0;
  layout.plan = fmt::format(
    "{}: {}; link-bound time per GiB of gradient: hierarchical "
    "{:.3f} s, flat {:.3f} s ({}){}",
    p.reduction == "auto" ? "auto" : "asked", layout.reduction, t.hierarchical, t.flat,
    t.rates, at_join ? "; ranks placed in racks as their workers join" : "");
  return true;
}

} // namespace rw::actors::detail
