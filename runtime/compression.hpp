#pragma once
// Gradient compression for the wire: 16-bit floats (bf16, or fp16 with a per-chunk
// power-of-two scale) and top-k sparsification with error feedback.
//
// The array conversions exist for scalar, AVX2+F16C and AVX-512 with AVX512_BF16
// (runtime/detail/compression_*.cpp); the best the CPU supports is chosen on first
// use, or explicitly with select_compression. Every path gives bitwise the result of
// the scalar element functions below, so a sender and a receiver on different CPUs
// agree on every value.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rw::runtime {

// --- one element: the reference every vector path equals bitwise ---------------------

/// float -> bf16, round to nearest even. float32 subnormal inputs become a zero of the
/// same sign (what AVX512_BF16's VCVTNEPS2BF16 does, whatever MXCSR says); NaN stays
/// NaN, made quiet: (bits >> 16) | 0x0040.
uint16_t to_bf16(float x) noexcept;
/// bf16 -> float, exact (bits << 16; a signalling NaN stays signalling).
float from_bf16(uint16_t h) noexcept;
/// float -> IEEE binary16, round to nearest even, fp16 subnormals kept, overflow to inf:
/// bitwise what F16C's VCVTPS2PH gives with _MM_FROUND_TO_NEAREST_INT. NaN becomes
/// sign | 0x7e00 | (mantissa >> 13) (quiet, the top 9 payload bits kept).
uint16_t to_fp16(float x) noexcept;
/// IEEE binary16 -> float, exact, bitwise what VCVTPH2PS gives: a NaN keeps its payload
/// and comes out quiet.
float from_fp16(uint16_t h) noexcept;

// --- whole arrays, with the best instruction set available ----------------------------

void pack_bf16(const float* in, uint16_t* out, size_t n) noexcept;
/// `in` needs 2-byte alignment only.
void unpack_bf16(const uint16_t* in, float* out, size_t n) noexcept;

/// The per-chunk scale for fp16, so small gradients do not underflow: the power of two
/// s with max|x| / s in [2^14, 2^15), the maximum taken over finite x (half the fp16
/// range stays free, so rounding up never overflows). 1 when no x is finite and
/// non-zero; at least 2^-126 (s is always a normal float, so 1/s is exact).
float fp16_scale(const float* in, size_t n) noexcept;
/// out[i] = to_fp16(in[i] * (1 / scale)); `scale` is a power of two (fp16_scale), so
/// 1 / scale is exact.
void pack_fp16(const float* in, float scale, uint16_t* out, size_t n) noexcept;
/// out[i] = from_fp16(in[i]) * scale.
void unpack_fp16(const uint16_t* in, float scale, float* out, size_t n) noexcept;

/// In place, what a receiver sees: x[i] = from_bf16(to_bf16(x[i])).
void round_bf16(float* x, size_t n) noexcept;
/// In place, what a receiver sees of one fp16 chunk: pack_fp16 then unpack_fp16 with
/// the fp16_scale of these n values.
void round_fp16(float* x, size_t n) noexcept;

/// Conversion paths this CPU can run, best last: "scalar", then "avx2" (avx2 and f16c),
/// "avx512" (avx512f, avx512bw, avx512vl and avx512_bf16).
std::vector<std::string> compression_isas();
/// The path in use.
const char* compression_isa() noexcept;
/// Uses `isa` ("auto", "scalar", "avx2", "avx512") from now on. Throws
/// std::invalid_argument for an unknown name or one this CPU cannot run.
void select_compression(const std::string& isa);

// --- top-k with error feedback (Deep Gradient Compression) ----------------------------

/// How many of n (< 2^32) elements a chunk sends at `ratio` (0 < ratio <= 1):
/// max(1, ceil(ratio * n)) computed in double, at most n (0 for an empty chunk).
uint32_t topk_count(float ratio, size_t n) noexcept;

/// A topk job sends a chunk of fewer elements than this whole (k = n): a bias or a small
/// layer costs little on the wire, and starved of updates (one entry of a 16-element
/// bias per step at 1 %) it holds training back most.
constexpr size_t topk_dense_below = 1024;

/// The ratio a topk job with `ratio` and `warmup` sends at step `step`: during the first
/// `warmup` steps four equal stages at 1/4, 1/16, 1/64 and 1/256 (Deep Gradient
/// Compression's warm-up), never less than `ratio`; then `ratio`.
float topk_ratio_at(float ratio, uint32_t warmup, uint64_t step) noexcept;

/// How many of a chunk's n elements a topk job sends at step `step`: all of a chunk
/// shorter than topk_dense_below, else topk_count(topk_ratio_at(ratio, warmup, step), n).
uint32_t topk_chunk_count(float ratio, uint32_t warmup, uint64_t step, size_t n) noexcept;

/// The k entries of r (n < 2^32) with the largest magnitude, written to `indices` in
/// ascending index order (indices.size() == min(k, n) after). The order is a strict
/// total order on the float's magnitude bits (bits & 0x7fffffff) descending, then the
/// index ascending, so the choice is the same with any standard library and NaN is
/// simply the largest magnitude. O(n) on average.
void select_topk(const float* r, size_t n, uint32_t k, std::vector<uint32_t>& indices);

/// One chunk's step of error feedback: residual[i] += grad[i] for every i, then the
/// select_topk of the residual is sent, as (index, residual value) pairs in `indices`
/// and `values` (ascending index), and zeroed in the residual, which keeps what was not
/// sent for the next step.
void topk_feedback(float* residual, const float* grad, size_t n, uint32_t k,
                   std::vector<uint32_t>& indices, std::vector<float>& values);

namespace detail {
/// One instruction set's array conversions (scalar ones in compression.cpp).
struct compression_table {
  const char* isa;
  void (*pack_bf16)(const float* in, uint16_t* out, size_t n);
  void (*unpack_bf16)(const uint16_t* in, float* out, size_t n);
  /// The largest (bits & 0x7fffffff) over the finite in[i], 0 when there is none: for
  /// non-negative floats the integer order is the float order.
  uint32_t (*max_finite_magnitude)(const float* in, size_t n);
  void (*pack_fp16)(const float* in, float inv_scale, uint16_t* out, size_t n);
  void (*unpack_fp16)(const uint16_t* in, float scale, float* out, size_t n);
};
compression_table scalar_compression() noexcept;
compression_table avx2_compression() noexcept;
compression_table avx512_compression() noexcept;
} // namespace detail

} // namespace rw::runtime
