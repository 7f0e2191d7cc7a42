// The array conversions with AVX2 and F16C (built with -mavx2 -mf16c: CMakeLists.txt),
// eight floats at a time. fp16 is one F16C instruction each way; AVX2 has no bf16
// instruction, so to_bf16's integer rounding runs in eight 32-bit lanes. Tails go
// through the scalar element functions, which compression.cpp builds for the baseline.
#include <immintrin.h>

#include "runtime/compression.hpp"

namespace rw::runtime::detail {

namespace {

// VCVTPS2PH rounds by its immediate, not by MXCSR.RC; no exception flags are wanted.
constexpr int fp16_rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// to_bf16 of eight floats (as their bits), each result in the low half of its lane.
__m256i bf16_lanes(__m256i b) {
  const __m256i magnitude = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
  // Signed compares are right: a magnitude is below 2^31.
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), magnitude);
  const __m256i high = _mm256_srli_epi32(b, 16);
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                        _mm256_and_si256(high, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x0040));
  const __m256i signed_zero = _mm256_and_si256(high, _mm256_set1_epi32(0x8000));
  return _mm256_blendv_epi8(_mm256_blendv_epi8(rounded, quiet, nan), signed_zero, tiny);
}

void avx2_pack_bf16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i lanes = bf16_lanes(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    // Every lane is below 2^16, so the saturating pack only narrows.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(lanes),
                                            _mm256_extracti128_si256(lanes, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i)
    out[i] = to_bf16(in[i]);
}

void avx2_unpack_bf16(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(wide, 16));
  }
  for (; i < n; ++i)
    out[i] = from_bf16(in[i]);
}

uint32_t avx2_max_finite_magnitude(const float* in, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  __m256i best = _mm256_setzero_si256();
  auto fold = [&](__m256i b) {
    const __m256i magnitude = _mm256_and_si256(b, abs_mask);
    const __m256i finite = _mm256_cmpgt_epi32(inf, magnitude);
    best = _mm256_max_epi32(best, _mm256_and_si256(magnitude, finite));
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    fold(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
  if (i < n) { // the lanes past the end load as 0, which never wins
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                            lane);
    fold(_mm256_maskload_epi32(reinterpret_cast<const int*>(in + i), mask));
  }
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(best),
                            _mm256_extracti128_si256(best, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

void avx2_pack_fp16(const float* in, float inv_scale, uint16_t* out, size_t n) {
  const __m256 inv = _mm256_set1_ps(inv_scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(in + i), inv);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(x, fp16_rounding));
  }
  for (; i < n; ++i)
    out[i] = to_fp16(in[i] * inv_scale);
}

void avx2_unpack_fp16(const uint16_t* in, float scale, float* out, size_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(x, s));
  }
  for (; i < n; ++i)
    out[i] = from_fp16(in[i]) * scale;
}

} // namespace

compression_table avx2_compression() noexcept {
  return {"avx2",         avx2_pack_bf16,  avx2_unpack_bf16, avx2_max_finite_magnitude,
          avx2_pack_fp16, avx2_unpack_fp16};
}

} // namespace rw::runtime::detail
