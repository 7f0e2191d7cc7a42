// Where a new job goes: the nodes a placement names (one node, several, or every node
// of some racks; else the least-loaded live node), in ring order, and how the job
// reduces across them.

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/detail/cluster_state.hpp"
#include "runtime/layerwise.hpp"

namespace rw::actors::detail {

namespace {

uint32_t live_jobs_on(const cluster_state& st, uint32_t node_id) {
  uint32_t load = 0;
  for (auto& [jid, j] : st.jobs)
    if (j.on_node(node_id) && !is_ended(j.report.state))
      ++load;
  return load;
}

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
        why = fmt::format("no live node is named '{}' (live nodes: {})", n, live_names(st));
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
        if (m.info.rack == r)
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
      auto load = live_jobs_on(st, id);
      if (load < best_load) {
        best = &m;
        best_load = load;
      }
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

std::string choose_reduction(const job_spec& spec, const job_placement& p,
                             const std::vector<const member*>& nodes, std::string& why) {
  if (p.reduction != "auto" && p.reduction != "flat" && p.reduction != "hierarchical") {
    why = fmt::format("reduction must be auto, flat or hierarchical, not '{}'", p.reduction);
    return {};
  }
  if (nodes.size() > 1 && runtime::is_layerwise(spec.optimizer.kind)) {
    why = fmt::format("optimizer {} takes its trust ratio over whole tensors, which this "
                      "version computes on one node only: place the job on one node",
                      to_string(spec.optimizer.kind));
    return {};
  }
  if (p.reduction == "hierarchical") {
    if (spec.consistency.model != consistency_spec::bsp) {
      why = fmt::format("hierarchical reduction is BSP-only; the job asks for {}: use "
                        "reduction = \"flat\" or consistency = \"bsp\"",
                        to_string(spec.consistency));
      return {};
    }
    why = "hierarchical reduction (per-rack partial sums) is not available in this "
          "version yet: use reduction = \"flat\" or \"auto\"";
    return {};
  }
  return "flat"; // auto: flat is the only plan this version runs
}

} // namespace rw::actors::detail
