#include "runtime/compression.hpp"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace rw::runtime {

namespace {

uint32_t bits_of(float x) noexcept {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float float_of(uint32_t b) noexcept {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

} // namespace

// --- one element ----------------------------------------------------------------------

uint16_t to_bf16(float x) noexcept {
  const uint32_t b = bits_of(x);
  const uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: truncating could leave a zero mantissa (inf)
    return static_cast<uint16_t>((b >> 16) | 0x0040u);
  // VCVTNEPS2BF16 treats subnormal inputs as zero regardless of MXCSR.DAZ; flushing
  // here too makes every path agree, and costs nothing a gradient needs (< 2^-126).
  if (magnitude < 0x00800000u)
    return static_cast<uint16_t>((b >> 16) & 0x8000u);
  // Round to nearest even on the 16 dropped bits: adding 0x7fff rounds a tie down,
  // the kept lsb pushes it up when odd. A carry into the exponent is right (up to inf).
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

float from_bf16(uint16_t h) noexcept {
  return float_of(static_cast<uint32_t>(h) << 16);
}

uint16_t to_fp16(float x) noexcept {
  const uint32_t b = bits_of(x);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: quiet, with the top of the payload
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  if (magnitude >= 0x477ff000u) // >= 65520 = 65504 + half an ulp: the tie goes to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) { // >= 2^-14, a normal fp16
    // Rebias the exponent (127 -> 15), then round to nearest even on the 13 dropped
    // mantissa bits; a carry into the exponent is the correct rounding up.
    const uint32_t r = magnitude - (112u << 23);
    return static_cast<uint16_t>(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
  }
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) // < 2^-25, less than half the smallest subnormal (2^-24)
    return sign;
  // An fp16 subnormal: the value in units of 2^-24 is mantissa * 2^(exponent - 126),
  // with the implicit bit; round to nearest even on the bits shifted out. Rounding up
  // to 0x400 gives the smallest normal, as it should.
  const uint32_t mantissa = (magnitude & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126 - exponent; // 14 ..= 24
  uint32_t q = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u)))
    ++q;
  return static_cast<uint16_t>(sign | q);
}

float from_fp16(uint16_t h) noexcept {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x03ffu;
  if (exponent == 0x1f) { // inf, NaN: VCVTPH2PS makes a signalling NaN quiet
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return float_of(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0)
    return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  return float_of(sign | bits_of(static_cast<float>(mantissa) * 0x1p-24f));
}

// --- the scalar array paths -----------------------------------------------------------

namespace detail {

namespace {

void scalar_pack_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = to_bf16(in[i]);
}

void scalar_unpack_bf16(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = from_bf16(in[i]);
}

uint32_t scalar_max_finite_magnitude(const float* in, size_t n) {
  uint32_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = bits_of(in[i]) & 0x7fffffffu;
    if (m < 0x7f800000u)
      best = std::max(best, m);
  }
  return best;
}

void scalar_pack_fp16(const float* in, float inv_scale, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = to_fp16(in[i] * inv_scale);
}

void scalar_unpack_fp16(const uint16_t* in, float scale, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = from_fp16(in[i]) * scale;
}

} // namespace

compression_table scalar_compression() noexcept {
  return {"scalar",           scalar_pack_bf16,
          scalar_unpack_bf16, scalar_max_finite_magnitude,
          scalar_pack_fp16,   scalar_unpack_fp16};
}

} // namespace detail

// --- dispatch -------------------------------------------------------------------------

namespace {

using detail::compression_table;

bool compression_cpu_has(const std::string& isa) {
  __builtin_cpu_init();
  if (isa == "scalar")
    return true;
  if (isa == "avx2") {
    // clang-14's __builtin_cpu_supports does not know "f16c": ask CPUID leaf 1. The
    // avx2 check has already made sure the OS saves the ymm registers F16C uses.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx)
           && (ecx & bit_F16C) != 0;
  }
  if (isa == "avx512") // exactly the -m flags of compression_avx512.cpp (CMakeLists.txt)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return false;
}

const compression_table& compression_table_for(const std::string& isa) {
  static const compression_table scalar = detail::scalar_compression();
  static const compression_table avx2 = detail::avx2_compression();
  static const compression_table avx512 = detail::avx512_compression();
  if (isa == "scalar")
    return scalar;
  if (isa == "avx2")
    return avx2;
  if (isa == "avx512")
    return avx512;
  throw std::invalid_argument("unknown compression instruction set '" + isa
                              + "' (auto, scalar, avx2, avx512)");
}

std::atomic<const compression_table*>& current_compression() {
  static std::atomic<const compression_table*> chosen{
    &compression_table_for(compression_isas().back())};
  return chosen;
}

const compression_table& active() noexcept {
  return *current_compression().load(std::memory_order_relaxed);
}

/// The power of two for fp16_scale given the largest finite magnitude's bits.
float scale_for(uint32_t magnitude) noexcept {
  if (magnitude == 0)
    return 1.0f;
  // floor(log2 max|x|) is the unbiased exponent. A subnormal maximum reads as -127,
  // not its true exponent, which makes no difference: anything below 2^-112 clamps.
  const int floor_log2 = static_cast<int>(magnitude >> 23) - 127;
  // floor_log2 <= 127 makes the exponent at most 113; only the lower end of [-126, 127]
  // binds, and keeps s a normal float so that 1/s is exact.
  const int exponent = std::max(floor_log2 - 14, -126);
  return float_of(static_cast<uint32_t>(exponent + 127) << 23);
}

} // namespace

std::vector<std::string> compression_isas() {
  std::vector<std::string> out;
  for (auto* isa : {"scalar", "avx2", "avx512"})
    if (compression_cpu_has(isa))
      out.emplace_back(isa);
  return out;
}

const char* compression_isa() noexcept {
  return active().isa;
}

void select_compression(const std::string& isa) {
  if (isa == "auto") {
    current_compression().store(&compression_table_for(compression_isas().back()),
                                std::memory_order_relaxed);
    return;
  }
  auto& t = compression_table_for(isa);
  if (!compression_cpu_has(isa))
    throw std::invalid_argument("this CPU cannot run the " + isa + " compression path");
  current_compression().store(&t, std::memory_order_relaxed);
}

// --- whole arrays ---------------------------------------------------------------------

void pack_bf16(const float* in, uint16_t* out, size_t n) noexcept {
  active().pack_bf16(in, out, n);
}

void unpack_bf16(const uint16_t* in, float* out, size_t n) noexcept {
  active().unpack_bf16(in, out, n);
}

float fp16_scale(const float* in, size_t n) noexcept {
  return scale_for(active().max_finite_magnitude(in, n));
}

void pack_fp16(const float* in, float scale, uint16_t* out, size_t n) noexcept {
  active().pack_fp16(in, 1.0f / scale, out, n);
}

void unpack_fp16(const uint16_t* in, float scale, float* out, size_t n) noexcept {
  active().unpack_fp16(in, scale, out, n);
}

namespace {

// Rounding in place goes through the wire format a tile at a time, so it is pack then
// unpack by construction, on whichever path is active.
constexpr size_t round_tile = 2048; // 4 KiB of 16-bit values: stays in L1

} // namespace

void round_bf16(float* x, size_t n) noexcept {
  auto& t = active();
  uint16_t wire[round_tile];
  for (size_t off = 0; off < n; off += round_tile) {
    const size_t len = std::min(round_tile, n - off);
    t.pack_bf16(x + off, wire, len);
    t.unpack_bf16(wire, x + off, len);
  }
}

void round_fp16(float* x, size_t n) noexcept {
  auto& t = active();
  const float scale = scale_for(t.max_finite_magnitude(x, n));
  const float inv_scale = 1.0f / scale;
  uint16_t wire[round_tile];
  for (size_t off = 0; off < n; off += round_tile) {
    const size_t len = std::min(round_tile, n - off);
    t.pack_fp16(x + off, inv_scale, wire, len);
    t.unpack_fp16(wire, scale, x + off, len);
  }
}

// --- top-k ----------------------------------------------------------------------------

uint32_t topk_count(float ratio, size_t n) noexcept {
  if (n == 0)
    return 0;
  const double wanted = std::ceil(static_cast<double>(ratio) * static_cast<double>(n));
  // Written so that a ratio outside (0, 1], NaN included, still gives a count in [1, n].
  if (!(wanted > 1.0))
    return 1;
  return wanted < static_cast<double>(n) ? static_cast<uint32_t>(wanted)
                                         : static_cast<uint32_t>(n);
}

float topk_ratio_at(float ratio, uint32_t warmup, uint64_t step) noexcept {
  if (step >= warmup)
    return ratio;
  // Stage s (0..3) of four equal ones: 4^-(s+1), exact in float.
  const auto stage = static_cast<uint32_t>(step * 4 / warmup);
  const float stage_ratio = 1.0f / static_cast<float>(1u << (2 * (stage + 1)));
  return stage_ratio > ratio ? stage_ratio : ratio;
}

uint32_t topk_chunk_count(float ratio, uint32_t warmup, uint64_t step,
                          size_t n) noexcept {
  if (n < topk_dense_below)
    return static_cast<uint32_t>(n);
  return topk_count(topk_ratio_at(ratio, warmup, step), n);
}

void select_topk(const float* r, size_t n, uint32_t k, std::vector<uint32_t>& indices) {
  indices.clear();
  const size_t count = std::min<size_t>(k, n);
  if (count == 0)
    return;
  if (count == n) { // everything: no ordering needed
    indices.resize(n);
    for (size_t i = 0; i < n; ++i)
      indices[i] = static_cast<uint32_t>(i);
    return;
  }
  // One 64-bit key per element, magnitude bits above the complemented index: a plain
  // integer order is the selection order (larger key first), every key is distinct, so
  // nth_element's choice does not depend on how the library breaks ties. Thread-local
  // so a step's selection does not allocate (and fault in) a chunk-sized array.
  thread_local std::vector<uint64_t> keys;
  keys.resize(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = static_cast<uint64_t>(bits_of(r[i]) & 0x7fffffffu) << 32
              | (0xffffffffu - static_cast<uint32_t>(i));
  auto kth = keys.begin() + static_cast<std::ptrdiff_t>(count);
  std::nth_element(keys.begin(), kth, keys.end(), std::greater<uint64_t>());
  indices.reserve(count);
  for (auto it = keys.begin(); it != kth; ++it)
    indices.push_back(0xffffffffu - static_cast<uint32_t>(*it));
  std::sort(indices.begin(), indices.end());
}

void topk_feedback(float* residual, const float* grad, size_t n, uint32_t k,
                   std::vector<uint32_t>& indices, std::vector<float>& values) {
  for (size_t i = 0; i < n; ++i)
    residual[i] += grad[i];
  select_topk(residual, n, k, indices);
  values.resize(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) {
    values[j] = residual[indices[j]];
    residual[indices[j]] = 0.0f;
  }
}

} // namespace rw::runtime
