#include "runtime/layerwise.hpp"

#include <cmath>

namespace rw::runtime {

bool is_layerwise(optimizer_kind kind) noexcept {
  return kind == optimizer_kind::lamb || kind == optimizer_kind::lars;
}

norm_parts layerwise_prepare(const optimizer_spec& s, float rescale, uint64_t step,
                             const float* p, const float* g_sum, optimizer_slots slots,
                             size_t n) noexcept {
  norm_parts parts;
  const float wd = s.weight_decay;
  if (s.kind == optimizer_kind::lamb) {
    const float b1 = s.beta1, b2 = s.beta2, eps = s.epsilon;
    const auto t = static_cast<double>(step);
    const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
    const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
    for (size_t i = 0; i < n; ++i) {
      float g = g_sum[i] * rescale;
      float m = b1 * slots.m[i] + (1.0f - b1) * g;
      float v = b2 * slots.v[i] + (1.0f - b2) * g * g;
      slots.m[i] = m;
      slots.v[i] = v;
      float d = (m / c1) / (std::sqrt(v / c2) + eps) + wd * p[i];
      slots.d[i] = d;
      parts.w2 += double{p[i]} * p[i];
      parts.d2 += double{d} * d;
    }
  } else { // lars
    for (size_t i = 0; i < n; ++i) {
      float g = g_sum[i] * rescale;
      slots.d[i] = g + wd * p[i];
      parts.w2 += double{p[i]} * p[i];
      parts.d2 += double{g} * g;
    }
  }
  return parts;
}

float layerwise_trust(const optimizer_spec& s, const norm_parts& tensor) noexcept {
  double w = std::sqrt(tensor.w2);
  double d = std::sqrt(tensor.d2);
  if (w <= 0 || d <= 0)
    return 1.0f;
  if (s.kind == optimizer_kind::lamb)
    return static_cast<float>(w / d);
  return static_cast<float>(s.eta * w / (d + s.weight_decay * w));
}

void layerwise_apply(const optimizer_spec& s, float trust, float* p,
                     optimizer_slots slots, size_t n) noexcept {
  const float lr = s.learning_rate;
  if (s.kind == optimizer_kind::lamb) {
    for (size_t i = 0; i < n; ++i)
      p[i] -= lr * trust * slots.d[i];
    return;
  }
  const float mu = s.momentum;
  for (size_t i = 0; i < n; ++i) {
    float m = mu * slots.m[i] + lr * trust * slots.d[i];
    slots.m[i] = m;
    p[i] -= m;
  }
}

} // namespace rw::runtime
