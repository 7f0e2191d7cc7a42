#pragma once
// The fixture job's exact answer: tensor t's parameters after `steps` BSP steps of
// `workers` ranks, computed in one process by summing the same gradients in rank order
// and applying the same optimizer with the same kernels. A node's result must be
// bitwise this. With `rank_racks` (a hierarchical job: each rank's rack), each rack's
// ranks are summed in rank order first, then the racks' sums in rack order.

#include <vector>

#include "runtime/chunking.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "tests/tools/fixture_job.hpp"

namespace rw::testing {

inline std::vector<float> fixture_sum(uint32_t t, uint32_t s, uint64_t n,
                                      uint32_t workers,
                                      const std::vector<uint32_t>& rank_racks) {
  if (rank_racks.empty()) {
    auto sum = fixture_gradient(0, s, t, n);
    for (uint32_t r = 1; r < workers; ++r) {
      auto g = fixture_gradient(r, s, t, n);
      runtime::sum_into(sum.data(), g.data(), n);
    }
    return sum;
  }
  uint32_t racks = 0;
  for (auto k : rank_racks)
    racks = std::max(racks, k + 1);
  std::vector<float> total;
  for (uint32_t k = 0; k < racks; ++k) {
    std::vector<float> part;
    for (uint32_t r = 0; r < workers; ++r) {
      if (rank_racks[r] != k)
        continue;
      auto g = fixture_gradient(r, s, t, n);
      if (part.empty())
        part = std::move(g);
      else
        runtime::sum_into(part.data(), g.data(), n);
    }
    if (total.empty())
      total = std::move(part);
    else if (!part.empty())
      runtime::sum_into(total.data(), part.data(), n);
  }
  return total;
}

inline std::vector<float> fixture_reference(
  const job_spec& spec, uint32_t t, uint32_t workers, uint32_t steps,
  const std::vector<uint32_t>& rank_racks = {}) {
  auto n = spec.tensors[t].elements;
  auto params = spec.tensors[t].has_init ? fixture_init(t, n) : std::vector<float>(n);
  std::vector<float> m(n), v(n), d(n);
  auto rescale = runtime::effective_rescale(spec.optimizer, workers);
  runtime::chunk_layout layout{n, spec.chunk_bytes};
  for (uint32_t s = 0; s < steps; ++s) {
    auto sum = fixture_sum(t, s, n, workers, rank_racks);
    if (!runtime::is_layerwise(spec.optimizer.kind)) {
      runtime::apply_optimizer(spec.optimizer, rescale, s + 1, params.data(), sum.data(),
                               {m.data(), v.data()}, n);
      continue;
    }
    // Layer-wise: prepare every chunk, add the norms in chunk order, then apply.
    runtime::norm_parts total;
    for (uint32_t c = 0; c < layout.count(); ++c) {
      auto o = layout.offset(c);
      auto part = runtime::layerwise_prepare(
        spec.optimizer, rescale, s + 1, params.data() + o, sum.data() + o,
        {m.data() + o, v.data() + o, d.data() + o}, layout.length(c));
      total.w2 += part.w2;
      total.d2 += part.d2;
    }
    auto trust = runtime::layerwise_trust(spec.optimizer, total);
    for (uint32_t c = 0; c < layout.count(); ++c) {
      auto o = layout.offset(c);
      runtime::layerwise_apply(spec.optimizer, trust, params.data() + o,
                               {m.data() + o, v.data() + o, d.data() + o},
                               layout.length(c));
    }
  }
  return params;
}

} // namespace rw::testing
