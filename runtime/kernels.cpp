#include "runtime/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace rw::runtime {

namespace {

bool feature(const std::string& f) {
  // __builtin_cpu_supports takes string literals only.
  if (f == "avx2")
    return __builtin_cpu_supports("avx2");
  if (f == "avx512f")
    return __builtin_cpu_supports("avx512f");
  if (f == "avx512dq")
    return __builtin_cpu_supports("avx512dq");
  return false;
}

bool cpu_has(const std::string& isa) {
  __builtin_cpu_init();
  if (isa != "scalar" && isa != "avx2" && isa != "avx512")
    return false;
  auto needed = cpu_features(isa);
  return std::all_of(needed.begin(), needed.end(), feature);
}

const kernel_table& table(const std::string& isa) {
  static const kernel_table scalar = detail::scalar_kernels();
  static const kernel_table avx2 = detail::avx2_kernels();
  static const kernel_table avx512 = detail::avx512_kernels();
  if (isa == "scalar")
    return scalar;
  if (isa == "avx2")
    return avx2;
  if (isa == "avx512")
    return avx512;
  throw std::invalid_argument("unknown kernel instruction set '" + isa
                              + "' (auto, scalar, avx2, avx512)");
}

std::atomic<const kernel_table*>& current() {
  static std::atomic<const kernel_table*> chosen{&table(supported_isas().back())};
  return chosen;
}

} // namespace

std::vector<std::string> cpu_features(const std::string& isa) {
  // Exactly the -m flags runtime/detail/kernels_<isa>.cpp is built with (CMakeLists.txt).
  if (isa == "avx2")
    return {"avx2"};
  if (isa == "avx512")
    return {"avx512f", "avx512dq"};
  return {};
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  for (auto* isa : {"scalar", "avx2", "avx512"})
    if (cpu_has(isa))
      out.emplace_back(isa);
  return out;
}

const kernel_table& kernels_for(const std::string& isa) {
  if (isa == "auto")
    return table(supported_isas().back());
  auto& t = table(isa);
  if (!cpu_has(isa))
    throw std::invalid_argument("this CPU cannot run the " + isa + " kernels");
  return t;
}

const kernel_table& kernels() noexcept {
  return *current().load(std::memory_order_relaxed);
}

void select_kernels(const std::string& isa) {
  current().store(&kernels_for(isa), std::memory_order_relaxed);
}

void step_inputs(const kernel_table& k, const optimizer_spec& spec, float rescale,
                 uint64_t step, float* p, const float* const* in, uint32_t count,
                 optimizer_slots slots, size_t n) noexcept {
  if (count == 1) {
    k.step(spec, rescale, step, p, in[0], nullptr, slots, n);
    return;
  }
  if (count == 2) {
    k.step(spec, rescale, step, p, in[0], in[1], slots, n);
    return;
  }
  constexpr size_t tile_elems = 1024; // 4 KiB: stays in L1 with its inputs' lines
  alignas(64) float tile[tile_elems];
  for (size_t off = 0; off < n; off += tile_elems) {
    auto len = std::min(tile_elems, n - off);
    k.add(tile, in[0] + off, in[1] + off, len);
    for (uint32_t j = 2; j + 1 < count; ++j)
      k.sum_into(tile, in[j] + off, len);
    optimizer_slots s{slots.m ? slots.m + off : nullptr,
                      slots.v ? slots.v + off : nullptr};
    k.step(spec, rescale, step, p + off, tile, in[count - 1] + off, s, len);
  }
}

int state_arrays(optimizer_kind kind) noexcept {
  switch (kind) {
    case optimizer_kind::momentum:
    case optimizer_kind::nesterov: return 1;
    case optimizer_kind::adam:
    case optimizer_kind::lars: // m, d
      return 2;
    case optimizer_kind::lamb: // m, v, d
      return 3;
    default: return 0;
  }
}

uint32_t kept_state_arrays(optimizer_kind kind) noexcept {
  const bool v = kind == optimizer_kind::adam || kind == optimizer_kind::lamb;
  return (state_arrays(kind) >= 1 ? 1u : 0u) + (v ? 1u : 0u);
}

float effective_rescale(const optimizer_spec& spec, uint32_t workers) noexcept {
  return spec.rescale != 0.0f ? spec.rescale : 1.0f / static_cast<float>(workers);
}

} // namespace rw::runtime
