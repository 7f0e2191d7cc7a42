#pragma once
// Layer-wise optimizers (LAMB, LARS): the step of each chunk is scaled by a trust
// ratio computed over the whole tensor, whose chunks live on different shards. So a
// step has two phases: every chunk prepares its update direction and the sums of
// squares it contributes; once the tensor's sums are in (added in chunk order, in
// double, so the result is deterministic), every chunk applies its direction scaled
// by the ratio.

#include <cstddef>
#include <cstdint>

#include "rackweave/job_spec.hpp"
#include "runtime/kernels.hpp"

namespace rw::runtime {

/// Whether `kind` needs the tensor-wide trust ratio.
bool is_layerwise(optimizer_kind kind) noexcept;

/// What one chunk contributes: sum of squares of the parameters and of the quantity
/// whose norm the ratio divides by (LAMB: the direction; LARS: the gradient).
struct norm_parts {
  double w2 = 0;
  double d2 = 0;
};

/// Phase 1 on one chunk: updates the optimizer's moments (m, and v for LAMB) and writes
/// the update direction into slots.d. `step` is the 1-based update count.
norm_parts layerwise_prepare(const optimizer_spec& s, float rescale, uint64_t step,
                             const float* p, const float* grad_sum, optimizer_slots slots,
                             size_t n) noexcept;

/// The trust ratio from the whole tensor's sums (1 where a norm is zero).
float layerwise_trust(const optimizer_spec& s, const norm_parts& tensor) noexcept;

/// Phase 2 on one chunk: applies the direction in slots.d, scaled by `trust`.
void layerwise_apply(const optimizer_spec& s, float trust, float* p,
                     optimizer_slots slots, size_t n) noexcept;

} // namespace rw::runtime
