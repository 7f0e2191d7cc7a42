// The array conversions with AVX-512 (built with -mavx512f -mavx512bw -mavx512vl
// -mavx512bf16: CMakeLists.txt), sixteen floats at a time. bf16 is AVX512_BF16's
// VCVTNEPS2BF16 (round to nearest even, subnormal inputs as zero, NaN quiet: exactly
// to_bf16), fp16 the EVEX VCVTPS2PH / VCVTPH2PS. The tail is one masked pass (masked
// loads do not fault past the end), so there is no scalar loop.

// GCC 12.2's AVX-512 headers start results from `__Y = __Y` (_mm512_undefined_*),
// which -Wuninitialized reports at every inlined use (GCC PR 105593, fixed upstream).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "runtime/compression.hpp"

namespace rw::runtime::detail {

namespace {

// VCVTPS2PH rounds by its immediate, not by MXCSR.RC; no exception flags are wanted.
constexpr int fp16_rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// The lanes of the last, partial block of 16.
__mmask16 tail_mask(size_t remaining) {
  return static_cast<__mmask16>((1u << remaining) - 1);
}

// Runs body(i, mask) over blocks of 16: full ones unmasked, then the partial one.
template <typename Body>
void blocks_of_16(size_t n, Body body) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    body(i, static_cast<__mmask16>(0xffff));
  if (i < n)
    body(i, tail_mask(n - i));
}

void avx512_pack_bf16(const float* in, uint16_t* out, size_t n) {
  blocks_of_16(n, [&](size_t i, __mmask16 m) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, in + i));
    _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<const __m256i&>(h));
  });
}

void avx512_unpack_bf16(const uint16_t* in, float* out, size_t n) {
  blocks_of_16(n, [&](size_t i, __mmask16 m) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  });
}

uint32_t avx512_max_finite_magnitude(const float* in, size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  __m512i best = _mm512_setzero_si512();
  blocks_of_16(n, [&](size_t i, __mmask16 m) {
    const __m512i magnitude = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, in + i),
                                               abs_mask);
    const __mmask16 finite = _mm512_cmplt_epu32_mask(magnitude, inf);
    best = _mm512_mask_max_epu32(best, finite, best, magnitude);
  });
  return _mm512_reduce_max_epu32(best);
}

void avx512_pack_fp16(const float* in, float inv_scale, uint16_t* out, size_t n) {
  const __m512 inv = _mm512_set1_ps(inv_scale);
  blocks_of_16(n, [&](size_t i, __mmask16 m) {
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + i), inv);
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(x, fp16_rounding));
  });
}

void avx512_unpack_fp16(const uint16_t* in, float scale, float* out, size_t n) {
  const __m512 s = _mm512_set1_ps(scale);
  blocks_of_16(n, [&](size_t i, __mmask16 m) {
    const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(x, s));
  });
}

} // namespace

compression_table avx512_compression() noexcept {
  return {"avx512",           avx512_pack_bf16,
          avx512_unpack_bf16, avx512_max_finite_magnitude,
          avx512_pack_fp16,   avx512_unpack_fp16};
}

} // namespace rw::runtime::detail
