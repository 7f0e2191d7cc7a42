#include "runtime/kernels.hpp"

#include <cmath>
#include <cstring>

namespace rw::runtime {

void sum_into(float* __restrict acc, const float* __restrict x, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i)
    acc[i] += x[i];
}

int state_arrays(optimizer_kind kind) noexcept {
  switch (kind) {
    case optimizer_kind::momentum:
    case optimizer_kind::nesterov:
      return 1;
    case optimizer_kind::adam:
      return 2;
    default:
      return 0;
  }
}

float effective_rescale(const optimizer_spec& spec, uint32_t workers) noexcept {
  return spec.rescale != 0.0f ? spec.rescale : 1.0f / static_cast<float>(workers);
}

void apply_optimizer(const optimizer_spec& s, float rescale, uint64_t step,
                     float* __restrict p, const float* __restrict g_sum,
                     optimizer_slots slots, size_t n) noexcept {
  const float lr = s.learning_rate;
  const float wd = s.weight_decay;
  switch (s.kind) {
    case optimizer_kind::sum:
      std::memcpy(p, g_sum, n * sizeof(float));
      return;
    case optimizer_kind::sgd:
      for (size_t i = 0; i < n; ++i) {
        float g = g_sum[i] * rescale + wd * p[i];
        p[i] -= lr * g;
      }
      return;
    case optimizer_kind::momentum: {
      const float mu = s.momentum;
      for (size_t i = 0; i < n; ++i) {
        float g = g_sum[i] * rescale + wd * p[i];
        float m = mu * slots.m[i] + g;
        slots.m[i] = m;
        p[i] -= lr * m;
      }
      return;
    }
    case optimizer_kind::nesterov: {
      const float mu = s.momentum;
      for (size_t i = 0; i < n; ++i) {
        float g = g_sum[i] * rescale + wd * p[i];
        float m = mu * slots.m[i] + g;
        slots.m[i] = m;
        p[i] -= lr * (g + mu * m);
      }
      return;
    }
    case optimizer_kind::adam: {
      const float b1 = s.beta1;
      const float b2 = s.beta2;
      const float eps = s.epsilon;
      const auto t = static_cast<double>(step);
      const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
      const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
      for (size_t i = 0; i < n; ++i) {
        float g = g_sum[i] * rescale + wd * p[i];
        float m = b1 * slots.m[i] + (1.0f - b1) * g;
        float v = b2 * slots.v[i] + (1.0f - b2) * g * g;
        slots.m[i] = m;
        slots.v[i] = v;
        p[i] -= lr * (m / c1) / (std::sqrt(v / c2) + eps);
      }
      return;
    }
  }
}

} // namespace rw::runtime
