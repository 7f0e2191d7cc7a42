#pragma once
// auto's arithmetic: the link rates a job's plan uses, where each came from, and each
// reduction's link-bound time with them.
//
// Per node, its rack's agg links A: --uplink-gbps (configured), else the speed its
// first endpoint's NIC reports (NIC speed), else as fast as its core link (assumed).
// Its core link C: --core-gbps (configured), else the slowest probe that touched it
// (probed, actors/cluster/probes.cpp), else unknown. The plan takes the slowest node's
// A and C; with none known, A counts as 1 Gbit/s and C as A (the equal-links rule).

#include <string>
#include <vector>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

struct plan_times {
  double hierarchical = 0, flat = 0; // link-bound seconds per GiB of gradient
  double agg_gbps = 0, core_gbps = 0;
  std::string rates; // "agg links A Gbit/s (source), core links C Gbit/s (source)"
};

/// Per step, with p workers in the busiest rack and R racks, the agg link carries
/// p + 2(R-1)/R (hierarchical) or W/R (flat) times S, the core link 2(R-1)/R or
/// p(R-1)/R + (W-p)/R times S; each plan's time is its busier link's.
plan_times estimate(const job_spec& spec, const std::vector<uint32_t>& ranks,
                    const std::vector<const member*>& nodes, const core_probes& probes);

} // namespace rw::actors::detail
