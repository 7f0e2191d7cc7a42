#include "actors/cluster/link_plan.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rw::actors::detail {

namespace {

struct rate {
  double gbps = 0; // 0: unknown
  std::string source;
};

// The slowest of the rates known; unknown if none is.
rate slowest(const std::vector<rate>& rates) {
  rate out;
  for (auto& r : rates)
    if (r.gbps > 0 && (out.gbps == 0 || r.gbps < out.gbps))
      out = r;
  return out;
}

rate core_of(const member& m, const core_probes& probes,
             std::set<std::string>& failures) {
  if (m.info.core_gbps > 0)
    return {m.info.core_gbps, "configured"};
  auto it = probes.find(m.info.id);
  if (it == probes.end())
    return {};
  rate out;
  for (auto& p : it->second) {
    if (!p.ok) {
      failures.insert(fmt::format("the probe {}->{} failed: {}", p.from, p.to, p.error));
      continue;
    }
    if (out.gbps == 0 || p.gbps < out.gbps) {
      // A result from the cache says how old it is.
      auto age = std::chrono::duration_cast<std::chrono::seconds>(steady::now() - p.when);
      out = {p.gbps, fmt::format("probed {}->{} in {:.0f} ms{}", p.from, p.to,
                                 std::max(1.0, p.elapsed_us / 1e3),
                                 age.count() >= 1 ? fmt::format(", {} s ago", age.count())
                                                  : std::string{})};
    }
  }
  return out;
}

rate agg_of(const member& m, const rate& core) {
  if (m.info.uplink_gbps > 0)
    return {m.info.uplink_gbps, "configured"};
  if (m.info.nic_gbps > 0)
    return {m.info.nic_gbps,
            fmt::format("NIC speed of {}'s {}", m.info.name, m.info.nic)};
  if (core.gbps > 0)
    return {core.gbps, "not configured, no NIC speed: assumed as fast as the core link"};
  return {};
}

} // namespace

plan_times estimate(const job_spec& spec, const std::vector<uint32_t>& ranks,
                    const std::vector<const member*>& nodes, const core_probes& probes) {
  std::vector<rate> aggs, cores;
  std::set<std::string> failures;
  for (auto* m : nodes) {
    cores.push_back(core_of(*m, probes, failures));
    aggs.push_back(agg_of(*m, cores.back()));
  }
  auto a = slowest(aggs);
  if (a.gbps == 0)
    a = {1.0, "assumed: nothing configured, reported or probed"};
  auto c = slowest(cores);
  if (c.gbps == 0)
    c = {a.gbps, "not configured or measured: as the agg links"};
  if (!failures.empty())
    c.source += fmt::format("; {}", fmt::join(failures, "; "));
  plan_times t;
  t.agg_gbps = a.gbps;
  t.core_gbps = c.gbps;
  t.rates = fmt::format("agg links {:.3g} Gbit/s ({}), core links {:.3g} Gbit/s ({})",
                        a.gbps, a.source, c.gbps, c.source);
  double r = static_cast<double>(nodes.size());
  double w = spec.num_workers;
  std::vector<double> per(nodes.size(), 0);
  for (auto k : ranks)
    per[k] += 1;
  double p = *std::max_element(per.begin(), per.end());
  const double gib_bits = 8.0 * (1u << 30) / 1e9; // one GiB, in Gbit
  t.hierarchical = gib_bits
                   * std::max((p + 2 * (r - 1) / r) / a.gbps, 2 * (r - 1) / r / c.gbps);
  t.flat = gib_bits * std::max(w / r / a.gbps, (p * (r - 1) / r + (w - p) / r) / c.gbps);
  return t;
}

} // namespace rw::actors::detail
