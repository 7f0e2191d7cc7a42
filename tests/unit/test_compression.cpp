#include <algorithm>
#include <cmath>
#include <cpuid.h>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/compression.hpp"

namespace rw_unit_compression {

namespace rt = rw::runtime;

namespace {

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

uint32_t bits_of(float x) {
  return bits(x);
}

uint32_t bits_of(uint16_t h) {
  return h;
}

// "" when got and want are bitwise equal, else where and how they first differ (so a
// failing REQUIRE(same_bits(...) == "") says it).
template <typename T>
std::string same_bits(const T* got, const T* want, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (bits_of(got[i]) != bits_of(want[i])) {
      std::ostringstream out;
      out << "element " << i << " of " << n << std::hex << ": got 0x" << bits_of(got[i])
          << ", want 0x" << bits_of(want[i]);
      return out.str();
    }
  return "";
}

// Random float bit patterns weighted towards the cases the conversions treat apart:
// float subnormals, inf and NaN, the fp16 subnormal/normal and overflow boundaries and
// exact ties for both formats; the rest anywhere.
std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> out(n);
  for (auto& x : out) {
    const uint32_t r = g();
    uint32_t b = r;
    switch (g() % 8) {
      case 0: // zero or float subnormal
        b = r & 0x807fffffu;
        break;
      case 1: // inf (mantissa 0) or NaN, signalling and quiet
        b = (r & 1u) ? (r & 0x80000000u) | 0x7f800000u : r | 0x7f800000u;
        break;
      case 2: // 2^-26 ..< 2^-11: fp16 subnormals and the smallest normals
        b = (r & 0x807fffffu) | ((101u + g() % 15) << 23);
        break;
      case 3: // 2^14 ..< 2^17: around the fp16 maximum 65504
        b = (r & 0x807fffffu) | ((141u + g() % 3) << 23);
        break;
      case 4: // bf16 tie: the dropped 16 bits are exactly one half
        b = (r & 0xffff0000u) | 0x8000u;
        break;
      case 5: // fp16 tie in its normal range: the dropped 13 bits are one half
        b = (r & 0x807fe000u) | ((113u + g() % 30) << 23) | 0x1000u;
        break;
      case 6: // fp16 tie in its subnormal range: an odd multiple of 2^-25
        x = static_cast<float>(2 * (r % 1024) + 1) * 0x1p-25f * (g() % 2 ? -1.0f : 1.0f);
        continue;
      default: break;
    }
    x = from_bits(b);
  }
  return out;
}

// fp16_scale written from its definition with <cmath>, independent of the module.
float reference_scale(const float* x, size_t n) {
  float max = 0.0f;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i]))
      max = std::max(max, std::fabs(x[i]));
  if (max == 0.0f)
    return 1.0f;
  return std::ldexp(1.0f, std::max(std::ilogb(max) - 14, -126));
}

// Selects a conversion path for one scope; "auto" again afterwards, even on failure.
struct path_guard {
  explicit path_guard(const std::string& isa) { rt::select_compression(isa); }
  ~path_guard() { rt::select_compression("auto"); }
  path_guard(const path_guard&) = delete;
  path_guard& operator=(const path_guard&) = delete;
};

bool supported(const std::string& isa) {
  auto isas = rt::compression_isas();
  return std::find(isas.begin(), isas.end(), isa) != isas.end();
}

// All 65536 16-bit patterns: widened by the path equal the element function, and
// narrowed back equal the element function too.
void check_all_halves() {
  std::vector<uint16_t> all(65536 + 1), back(65536);
  for (uint32_t h = 0; h < 65536; ++h)
    all[h + 1] = static_cast<uint16_t>(h);
  const uint16_t* in = all.data() + 1; // 2-byte aligned only
  std::vector<float> wide(65536), want(65536);
  std::vector<uint16_t> want_back(65536);

  rt::unpack_bf16(in, wide.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h)
    want[h] = rt::from_bf16(static_cast<uint16_t>(h));
  REQUIRE(same_bits(wide.data(), want.data(), 65536) == "");
  rt::pack_bf16(wide.data(), back.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h)
    want_back[h] = rt::to_bf16(wide[h]);
  REQUIRE(same_bits(back.data(), want_back.data(), 65536) == "");

  rt::unpack_fp16(in, 1.0f, wide.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h)
    want[h] = rt::from_fp16(static_cast<uint16_t>(h));
  REQUIRE(same_bits(wide.data(), want.data(), 65536) == "");
  rt::pack_fp16(wide.data(), 1.0f, back.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h)
    want_back[h] = rt::to_fp16(wide[h]);
  REQUIRE(same_bits(back.data(), want_back.data(), 65536) == "");
}

// Every array function of the active path against the element functions, on `n`
// random patterns starting `offset` elements into the buffers (unaligned starts).
void check_arrays(size_t n, size_t offset, uint32_t seed) {
  INFO("n=" << n << " offset=" << offset);
  const auto data = random_floats(n + offset, seed);
  const float* in = data.data() + offset;
  std::vector<uint16_t> packed(n + offset), want_packed(n);
  std::vector<float> unpacked(n + offset), want(n);

  rt::pack_bf16(in, packed.data() + offset, n);
  for (size_t i = 0; i < n; ++i)
    want_packed[i] = rt::to_bf16(in[i]);
  REQUIRE(same_bits(packed.data() + offset, want_packed.data(), n) == "");
  // Random 16-bit patterns, not just the packed ones, go back through unpack: the
  // halves of random float patterns, so NaN, inf and subnormals come up often.
  std::vector<uint16_t> halves(n + offset + 1);
  const auto wide = random_floats(halves.size() / 2 + 1, seed + 1);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = static_cast<uint16_t>(bits(wide[i / 2]) >> (i % 2 ? 16 : 0));
  const uint16_t* raw = halves.data() + offset;
  rt::unpack_bf16(raw, unpacked.data() + offset, n);
  for (size_t i = 0; i < n; ++i)
    want[i] = rt::from_bf16(raw[i]);
  REQUIRE(same_bits(unpacked.data() + offset, want.data(), n) == "");

  CHECK(bits(rt::fp16_scale(in, n)) == bits(reference_scale(in, n)));
  for (float scale : {1.0f, rt::fp16_scale(in, n), 0x1p-40f, 0x1p+20f}) {
    INFO("scale " << scale);
    rt::pack_fp16(in, scale, packed.data() + offset, n);
    for (size_t i = 0; i < n; ++i)
      want_packed[i] = rt::to_fp16(in[i] * (1.0f / scale));
    REQUIRE(same_bits(packed.data() + offset, want_packed.data(), n) == "");
    rt::unpack_fp16(raw, scale, unpacked.data() + offset, n);
    for (size_t i = 0; i < n; ++i)
      want[i] = rt::from_fp16(raw[i]) * scale;
    REQUIRE(same_bits(unpacked.data() + offset, want.data(), n) == "");
  }

  std::vector<float> x(in, in + n);
  rt::round_bf16(x.data(), n);
  for (size_t i = 0; i < n; ++i)
    want[i] = rt::from_bf16(rt::to_bf16(in[i]));
  REQUIRE(same_bits(x.data(), want.data(), n) == "");
  x.assign(in, in + n);
  rt::round_fp16(x.data(), n);
  const float s = reference_scale(in, n);
  for (size_t i = 0; i < n; ++i)
    want[i] = rt::from_fp16(rt::to_fp16(in[i] * (1.0f / s))) * s;
  REQUIRE(same_bits(x.data(), want.data(), n) == "");
}

// Runs `isa`'s conversions against the scalar element functions. A CPU without `isa`
// says SKIPPED (ctest marks the test skipped: tests/CMakeLists.txt), so a run never
// passes by comparing scalar with scalar.
void check_path(const std::string& isa) {
  if (!supported(isa)) {
    WARN("SKIPPED: this CPU cannot run the " << isa << " compression path");
    std::cout << "SKIPPED: this CPU cannot run the " << isa << " compression path\n";
    return;
  }
  path_guard guard(isa);
  REQUIRE(std::string(rt::compression_isa()) == isa);
  check_all_halves();
  uint32_t seed = 1;
  for (size_t n : {0u, 1u, 7u, 15u, 17u, 33u, 1000u})
    for (size_t offset : {0u, 1u})
      check_arrays(n, offset, seed++);
  check_arrays(size_t{4} << 20 | 3, 1, seed); // several million patterns, many tiles
}

} // namespace

TEST_CASE("bf16 rounds to nearest even, flushes float subnormals, quiets NaN",
          "[compression]") {
  CHECK(rt::to_bf16(1.0f) == 0x3f80);
  CHECK(rt::to_bf16(-2.5f) == 0xc020);
  CHECK(rt::to_bf16(from_bits(0x3f808000)) == 0x3f80); // tie: stays even
  CHECK(rt::to_bf16(from_bits(0x3f818000)) == 0x3f82); // tie: up to even
  CHECK(rt::to_bf16(from_bits(0x3f808001)) == 0x3f81); // above the tie
  CHECK(rt::to_bf16(from_bits(0x7f7fffff)) == 0x7f80); // FLT_MAX rounds to inf
  CHECK(rt::to_bf16(from_bits(0x00000001)) == 0x0000); // float subnormals: signed zero
  CHECK(rt::to_bf16(from_bits(0x807fffff)) == 0x8000);
  CHECK(rt::to_bf16(from_bits(0x00800000)) == 0x0080); // the smallest normal is kept
  CHECK(rt::to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(rt::to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(rt::to_bf16(from_bits(0x7f800001)) == 0x7fc0); // signalling NaN: quiet, not inf
  CHECK(rt::to_bf16(from_bits(0xffc12345)) == 0xffc1);
  CHECK(rt::from_bf16(0x3f80) == 1.0f);
  CHECK(bits(rt::from_bf16(0x7f81)) == 0x7f810000u); // widening is exact, even for NaN
}

TEST_CASE("fp16 rounds to nearest even, keeps subnormals, overflows to inf",
          "[compression]") {
  CHECK(rt::to_fp16(1.0f) == 0x3c00);
  CHECK(rt::to_fp16(-2.5f) == 0xc100);
  CHECK(rt::to_fp16(65504.0f) == 0x7bff);
  CHECK(rt::to_fp16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(rt::to_fp16(65520.0f) == 0x7c00); // the tie above the maximum goes to inf
  CHECK(rt::to_fp16(-1e6f) == 0xfc00);
  CHECK(rt::to_fp16(0x1p-24f) == 0x0001); // the smallest subnormal
  CHECK(rt::to_fp16(0x1p-25f) == 0x0000); // half of it: tie to even, zero
  CHECK(rt::to_fp16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(rt::to_fp16(3 * 0x1p-25f) == 0x0002); // 1.5 units: tie up to even
  CHECK(rt::to_fp16(std::nextafter(0x1p-14f, 0.0f)) == 0x0400); // rounds up to normal
  CHECK(rt::to_fp16(1.0f + 0x1p-11f) == 0x3c00);                // tie: stays even
  CHECK(rt::to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);            // tie: up to even
  CHECK(rt::to_fp16(from_bits(0x80000001)) == 0x8000);
  CHECK(rt::to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(rt::to_fp16(from_bits(0x7f800001)) == 0x7e00);
  CHECK(rt::to_fp16(from_bits(0xffc12345)) == 0xfe09);
  CHECK(rt::from_fp16(0x0001) == 0x1p-24f);
  CHECK(rt::from_fp16(0x7bff) == 65504.0f);
  CHECK(bits(rt::from_fp16(0x8000)) == 0x80000000u);
  CHECK(bits(rt::from_fp16(0x7c01)) == 0x7fc02000u); // like VCVTPH2PS: made quiet
}

TEST_CASE("every 16-bit value survives widening and narrowing", "[compression]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const bool bf16_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    const bool bf16_subnormal = (h & 0x7f80) == 0 && (h & 0x7f) != 0;
    const uint16_t bf16_want = bf16_nan         ? static_cast<uint16_t>(h | 0x40)
                               : bf16_subnormal ? static_cast<uint16_t>(h & 0x8000)
                                                : v;
    const bool fp16_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    const uint16_t fp16_want = fp16_nan ? static_cast<uint16_t>(h | 0x200) : v;
    INFO(std::hex << "0x" << h);
    REQUIRE(rt::to_bf16(rt::from_bf16(v)) == bf16_want);
    REQUIRE(rt::to_fp16(rt::from_fp16(v)) == fp16_want);
  }
}

TEST_CASE("scalar conversion arrays equal the element functions", "[compression]") {
  check_path("scalar");
}

TEST_CASE("avx2 conversions give bitwise the scalar result", "[compression]") {
  check_path("avx2");
}

TEST_CASE("avx512 conversions give bitwise the scalar result", "[compression]") {
  check_path("avx512");
}

TEST_CASE("compression path selection", "[compression]") {
  CHECK_THROWS_WITH(rt::select_compression("neon"), Catch::Contains("unknown"));
  auto isas = rt::compression_isas();
  REQUIRE(isas.front() == "scalar");
  for (const std::string isa : {"avx2", "avx512"})
    if (!supported(isa))
      CHECK_THROWS_WITH(rt::select_compression(isa), Catch::Contains("cannot run"));
  {
    path_guard guard("scalar");
    CHECK(std::string(rt::compression_isa()) == "scalar");
  }
  CHECK(std::string(rt::compression_isa()) == isas.back());
  // Each path needs every feature its file is built with (CMakeLists.txt).
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  if (supported("avx2")) {
    CHECK(__builtin_cpu_supports("avx2"));
    CHECK((ecx & bit_F16C) != 0);
  }
  if (supported("avx512")) {
    CHECK(__builtin_cpu_supports("avx512f"));
    CHECK(__builtin_cpu_supports("avx512bw"));
    CHECK(__builtin_cpu_supports("avx512vl"));
    CHECK(__builtin_cpu_supports("avx512bf16"));
  }
}

TEST_CASE("fp16_scale puts the largest finite magnitude between 2^14 and 2^15",
          "[compression]") {
  std::vector<float> zeros(100, 0.0f);
  CHECK(rt::fp16_scale(zeros.data(), zeros.size()) == 1.0f);
  CHECK(rt::fp16_scale(nullptr, 0) == 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special{inf, -inf, std::nanf(""), -0.0f};
  CHECK(rt::fp16_scale(special.data(), special.size())
        == 1.0f); // nothing finite non-zero
  special.push_back(-3.0f);
  CHECK(rt::fp16_scale(special.data(), special.size()) == 0x1p-13f); // 3 / 2^-13 = 24576
  float max = std::numeric_limits<float>::max();
  CHECK(rt::fp16_scale(&max, 1) == 0x1p113f);
  float subnormal = from_bits(0x00000100); // 2^-141: the exponent clamps at -126
  CHECK(rt::fp16_scale(&subnormal, 1) == 0x1p-126f);
  for (int e = -112; e <= 127; e += 7) {
    std::vector<float> x{std::ldexp(1.75f, e) * (e % 2 ? -1.0f : 1.0f),
                         std::ldexp(1.0f, e - 3)};
    const float s = rt::fp16_scale(x.data(), x.size());
    INFO("e=" << e << " scale=" << s);
    CHECK((bits(s) & 0x007fffffu) == 0); // a power of two
    const float top = std::fabs(x[0]) / s;
    CHECK(top >= 0x1p14f);
    CHECK(top < 0x1p15f);
  }
}

TEST_CASE("tiny gradients survive fp16 through the scale", "[compression]") {
  std::vector<float> g(1000);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = (i % 2 ? -1e-8f : 1e-8f) * (1.0f + static_cast<float>(i) / 1000.0f);
  CHECK(rt::to_fp16(1e-8f) == 0); // unscaled, 1e-8 is below half the smallest subnormal
  const float s = rt::fp16_scale(g.data(), g.size());
  std::vector<uint16_t> wire(g.size());
  std::vector<float> back(g.size());
  rt::pack_fp16(g.data(), s, wire.data(), g.size());
  rt::unpack_fp16(wire.data(), s, back.data(), g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(i << ": " << g[i] << " -> " << back[i]);
    REQUIRE(std::fabs(back[i] - g[i]) < std::fabs(g[i]) * 0x1p-10f);
  }
}

TEST_CASE("rounding in place is pack then unpack", "[compression]") {
  for (size_t n : {0u, 5u, 2048u, 2049u, 10000u}) {
    INFO("n=" << n);
    auto x = random_floats(n, 42);
    std::vector<uint16_t> wire(n);
    std::vector<float> want(n);
    auto y = x;
    rt::pack_bf16(x.data(), wire.data(), n);
    rt::unpack_bf16(wire.data(), want.data(), n);
    rt::round_bf16(y.data(), n);
    REQUIRE(same_bits(y.data(), want.data(), n) == "");
    const float s = rt::fp16_scale(x.data(), n);
    rt::pack_fp16(x.data(), s, wire.data(), n);
    rt::unpack_fp16(wire.data(), s, want.data(), n);
    y = x;
    rt::round_fp16(y.data(), n);
    REQUIRE(same_bits(y.data(), want.data(), n) == "");
  }
}

TEST_CASE("topk_count", "[compression]") {
  CHECK(rt::topk_count(0.01f, 1000) == 10);
  CHECK(rt::topk_count(0.25f, 10) == 3);  // ceil(2.5)
  CHECK(rt::topk_count(0.001f, 10) == 1); // at least one
  CHECK(rt::topk_count(1e-9f, 1000000) == 1);
  CHECK(rt::topk_count(1.0f, 7) == 7);
  CHECK(rt::topk_count(1.0f, 1) == 1);
  CHECK(rt::topk_count(0.5f, 0) == 0);  // an empty chunk sends nothing
  CHECK(rt::topk_count(0.0f, 10) == 1); // max(1, ...) even outside (0, 1]
  CHECK(rt::topk_count(std::nanf(""), 10) == 1);
  CHECK(rt::topk_count(2.0f, 10) == 10); // at most n
  // In double, 0.3f is 0.30000001192...: ceil(3.0000001) is 4, on every platform.
  CHECK(rt::topk_count(0.3f, 10) == 4);
  CHECK(rt::topk_count(0.5f, size_t{3000000000u}) == 1500000000u);
}

TEST_CASE("topk_ratio_at and topk_chunk_count: the warm-up's stages and short chunks",
          "[compression]") {
  // No warm-up: the ratio from the first step.
  CHECK(rt::topk_ratio_at(0.01f, 0, 0) == 0.01f);
  // 8 steps: 2 at each of 1/4, 1/16, 1/64, 1/256, then the ratio.
  const std::vector<float> stages{0.25f,     0.25f,       0.0625f,     0.0625f, 0.015625f,
                                  0.015625f, 0.00390625f, 0.00390625f, 0.001f,  0.001f};
  for (uint64_t step = 0; step < stages.size(); ++step)
    CHECK(rt::topk_ratio_at(0.001f, 8, step) == stages[step]);
  // Never below the ratio: topk:0.1 warms up at 1/4, then sends 0.1.
  CHECK(rt::topk_ratio_at(0.1f, 8, 0) == 0.25f);
  CHECK(rt::topk_ratio_at(0.1f, 8, 2) == 0.1f);
  CHECK(rt::topk_ratio_at(0.5f, 8, 0) == 0.5f);
  // Stages of unequal length round down: 5 steps, stage = step * 4 / 5.
  CHECK(rt::topk_ratio_at(0.001f, 5, 1) == 0.25f);
  CHECK(rt::topk_ratio_at(0.001f, 5, 2) == 0.0625f);
  CHECK(rt::topk_ratio_at(0.001f, 5, 4) == 0.00390625f);
  CHECK(rt::topk_ratio_at(0.001f, 5, 5) == 0.001f);
  // The largest warm-up: no overflow in step * 4.
  CHECK(rt::topk_ratio_at(0.001f, 1u << 31, (uint64_t{1} << 31) - 1) == 0.00390625f);
  CHECK(rt::topk_ratio_at(0.001f, 1u << 31, uint64_t{1} << 40) == 0.001f);

  // A chunk shorter than topk_dense_below is sent whole, warm-up or not.
  CHECK(rt::topk_chunk_count(0.01f, 0, 0, 16) == 16);
  CHECK(rt::topk_chunk_count(0.01f, 0, 0, rt::topk_dense_below - 1)
        == rt::topk_dense_below - 1);
  CHECK(rt::topk_chunk_count(0.01f, 0, 0, rt::topk_dense_below) == 11); // ceil(10.24)
  CHECK(rt::topk_chunk_count(0.01f, 0, 0, 0) == 0);
  CHECK(rt::topk_chunk_count(0.001f, 8, 0, 4096) == 1024);
  CHECK(rt::topk_chunk_count(0.001f, 8, 7, 4096) == 16);
  CHECK(rt::topk_chunk_count(0.001f, 8, 8, 4096) == 5); // ceil(4.096)
}

namespace {

// select_topk by its definition: a full sort on (magnitude bits desc, index asc).
std::vector<uint32_t> reference_topk(const std::vector<float>& r, uint32_t k) {
  std::vector<uint32_t> order(r.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const uint32_t ma = bits(r[a]) & 0x7fffffffu, mb = bits(r[b]) & 0x7fffffffu;
    return ma != mb ? ma > mb : a < b;
  });
  order.resize(std::min<size_t>(k, order.size()));
  std::sort(order.begin(), order.end());
  return order;
}

} // namespace

TEST_CASE("select_topk matches a full sort, ties to the lower index", "[compression]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  std::mt19937 g(7);
  std::vector<uint32_t> got;
  for (int with_specials = 0; with_specials < 2; ++with_specials) {
    // Five values (two magnitudes with both signs, and zero): ties everywhere.
    std::vector<float> pool{0.0f, 1.0f, -1.0f, 2.5f, -2.5f};
    if (with_specials)
      pool.insert(pool.end(), {nan, -nan, inf, -inf, -0.0f});
    for (size_t n : {1u, 2u, 10u, 100u, 1000u, 4097u}) {
      std::vector<float> r(n);
      for (auto& x : r)
        x = pool[g() % pool.size()];
      for (uint32_t k : {0u, 1u, 3u, static_cast<uint32_t>(n / 3),
                         static_cast<uint32_t>(n > 0 ? n - 1 : 0),
                         static_cast<uint32_t>(n), static_cast<uint32_t>(n + 3)}) {
        INFO("n=" << n << " k=" << k << " specials=" << with_specials);
        rt::select_topk(r.data(), n, k, got);
        REQUIRE(got == reference_topk(r, k));
      }
    }
  }
  // NaN is simply the largest magnitude, then inf; -0 and 0 tie (lower index wins).
  std::vector<float> r{1.0f, inf, -nan, 3.0f, -0.0f, 0.0f};
  rt::select_topk(r.data(), r.size(), 1, got);
  CHECK(got == std::vector<uint32_t>{2});
  rt::select_topk(r.data(), r.size(), 3, got);
  CHECK(got == std::vector<uint32_t>{1, 2, 3});
  rt::select_topk(r.data(), r.size(), 5, got);
  CHECK(got == std::vector<uint32_t>{0, 1, 2, 3, 4});
}

TEST_CASE("topk_feedback sends the largest residuals and keeps the rest",
          "[compression]") {
  constexpr size_t n = 997;
  constexpr int steps = 20;
  std::mt19937 g(11);
  std::vector<float> residual(n, 0.0f), grad(n), sent_total(n, 0.0f), grad_total(n, 0.0f);
  std::vector<uint32_t> indices;
  std::vector<float> values;
  const uint32_t k = rt::topk_count(0.05f, n);
  for (int step = 0; step < steps; ++step) {
    // Small integers: every sum below is exact, so conservation holds bitwise.
    for (size_t i = 0; i < n; ++i) {
      grad[i] = static_cast<float>(static_cast<int>(g() % 21) - 10);
      grad_total[i] += grad[i];
    }
    std::vector<float> accumulated(n);
    for (size_t i = 0; i < n; ++i)
      accumulated[i] = residual[i] + grad[i];
    const auto chosen = reference_topk(accumulated, k);
    rt::topk_feedback(residual.data(), grad.data(), n, k, indices, values);
    INFO("step " << step);
    REQUIRE(indices == chosen);
    REQUIRE(values.size() == indices.size());
    size_t next = 0;
    for (size_t i = 0; i < n; ++i) {
      if (next < indices.size() && indices[next] == i) {
        REQUIRE(values[next] == accumulated[i]);
        REQUIRE(residual[i] == 0.0f);
        sent_total[i] += values[next];
        ++next;
      } else {
        REQUIRE(residual[i] == accumulated[i]);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("element " << i);
    REQUIRE(sent_total[i] + residual[i] == grad_total[i]);
  }
}

} // namespace rw_unit_compression
