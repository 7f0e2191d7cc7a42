#pragma once
// The arithmetic a shard runs on a chunk: summing gradients and the optimizer step.
// The same functions compute the single-process reference in tests, so a BSP result
// is bitwise equal to it as long as the summation order (worker rank) is the same.

#include <cstddef>
#include <cstdint>

#include "rackweave/job_spec.hpp"

namespace rw::runtime {

/// acc[i] += x[i] for i < n.
void sum_into(float* acc, const float* x, size_t n) noexcept;

/// Per-chunk optimizer state; which arrays are used depends on the optimizer.
struct optimizer_slots {
  float* m = nullptr; // momentum / Adam first moment
  float* v = nullptr; // Adam second moment
};

/// Number of state arrays (each as long as the chunk) `kind` needs.
int state_arrays(optimizer_kind kind) noexcept;

/// The gradient scale the optimizer applies to a sum of `workers` gradients.
float effective_rescale(const optimizer_spec& spec, uint32_t workers) noexcept;

/// Applies one optimizer step to `params` (n elements) given the summed gradient.
/// `step` is the 1-based update count (Adam's bias correction). For `sum`, params
/// become the gradient sum itself.
void apply_optimizer(const optimizer_spec& spec, float rescale, uint64_t step,
                     float* params, const float* grad_sum, optimizer_slots slots,
                     size_t n) noexcept;

} // namespace rw::runtime
