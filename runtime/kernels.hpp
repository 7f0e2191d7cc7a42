#pragma once
// The arithmetic a shard runs on a chunk: summing gradients and the optimizer step,
// fused. The same functions compute the single-process reference in tests, so a BSP
// result is bitwise equal to it as long as the summation order (worker rank) is the
// same.
//
// Each kernel exists for scalar, AVX2 and AVX-512 (runtime/detail/kernels_*.cpp); the
// best one the CPU supports is chosen on first use, or explicitly with select_kernels.
// All give bitwise-equal results (no reassociation, no FMA contraction).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/job_spec.hpp"

namespace rw::runtime {

/// Per-chunk optimizer state; which arrays are used depends on the optimizer.
struct optimizer_slots {
  float* m = nullptr; // momentum / Adam first moment
  float* v = nullptr; // Adam second moment
  float* d = nullptr; // LAMB / LARS: the direction between the two phases of a step
};

struct kernel_table {
  const char* isa;
  /// acc[i] += x[i]
  void (*sum_into)(float* acc, const float* x, size_t n);
  /// dst[i] = a[i] + b[i] (a running sum that starts from read-only memory)
  void (*add)(float* dst, const float* a, const float* b, size_t n);
  /// One optimizer step on p with the summed gradient acc (+ last, if not null), in one
  /// pass. For `sum`, p becomes the gradient sum itself.
  void (*step)(const optimizer_spec& spec, float rescale, uint64_t step, float* p,
               const float* acc, const float* last, optimizer_slots slots, size_t n);
  /// Benchmark reference: the same memory streams as `step`, plain adds only (m, v
  /// may be null, as for optimizers without state; read_p false when p is only
  /// written, as for `sum`).
  void (*stream)(float* p, const float* acc, const float* last, float* m, float* v,
                 bool read_p, size_t n);
};

/// The kernels in use (the best the CPU supports unless select_kernels said otherwise).
const kernel_table& kernels() noexcept;

/// Instruction sets this CPU can run, best last: "scalar", then "avx2", "avx512".
std::vector<std::string> supported_isas();

/// The CPU features an instruction set's kernels are compiled for (every one must be
/// present for them to run): avx512 needs avx512f and avx512dq.
std::vector<std::string> cpu_features(const std::string& isa);

/// Uses `isa` ("auto", "scalar", "avx2", "avx512") from now on. Throws
/// std::invalid_argument for an unknown name or one this CPU cannot run.
void select_kernels(const std::string& isa);

/// The table for one instruction set, for benchmarks and tests (same errors).
const kernel_table& kernels_for(const std::string& isa);

/// One optimizer step whose gradient is the sum of k inputs in order
/// (((in[0] + in[1]) + in[2]) + ...), bitwise what sum_into then step give, in one
/// pass over L1-sized tiles: no partial sum ever goes back to memory.
void step_inputs(const kernel_table& k, const optimizer_spec& spec, float rescale,
                 uint64_t step, float* p, const float* const* in, uint32_t count,
                 optimizer_slots slots, size_t n) noexcept;

/// acc[i] += x[i] for i < n.
inline void sum_into(float* acc, const float* x, size_t n) noexcept {
  kernels().sum_into(acc, x, n);
}

/// Number of state arrays (each as long as the chunk) `kind` needs.
int state_arrays(optimizer_kind kind) noexcept;

/// Of them, the arrays that outlive a step (a worker saves and loads them: m where the
/// optimizer keeps momentum or a first moment, then v for Adam and LAMB); not LAMB's and
/// LARS's direction d, which lives only inside a step.
uint32_t kept_state_arrays(optimizer_kind kind) noexcept;

/// The gradient scale the optimizer applies to a sum of `workers` gradients.
float effective_rescale(const optimizer_spec& spec, uint32_t workers) noexcept;

/// Applies one optimizer step to `params` (n elements) given the summed gradient.
/// `step` is the 1-based update count (Adam's bias correction).
inline void apply_optimizer(const optimizer_spec& spec, float rescale, uint64_t step,
                            float* params, const float* grad_sum, optimizer_slots slots,
                            size_t n) noexcept {
  kernels().step(spec, rescale, step, params, grad_sum, nullptr, slots, n);
}

namespace detail {
kernel_table scalar_kernels() noexcept;
kernel_table avx2_kernels() noexcept;
kernel_table avx512_kernels() noexcept;
} // namespace detail

} // namespace rw::runtime
