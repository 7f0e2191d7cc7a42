// The 16-bit chunk payloads of bf16 / fp16 jobs (protocol/half.hpp): sizes, the
// round trip, and every refusal a receiver makes before using one.

#include <cmath>
#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "protocol/frame.hpp"
#include "protocol/half.hpp"
#include "runtime/compression.hpp"

namespace rw_unit_half {

using namespace rw;
using namespace rw::protocol;

namespace {

std::vector<float> gradient(size_t n, float magnitude, uint32_t seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> dist{-magnitude, magnitude};
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

} // namespace

TEST_CASE("a compression's flag and payload size", "[half]") {
  CHECK(half_flag(parse_compression("none")) == 0);
  CHECK(half_flag(parse_compression("bf16")) == flag_bf16);
  CHECK(half_flag(parse_compression("fp16")) == flag_fp16);
  CHECK(half_flag(parse_compression("topk:0.1")) == 0);
  CHECK(half_payload_bytes(flag_bf16, 1024) == 2048);
  CHECK(half_payload_bytes(flag_fp16, 1024) == 2052);
  CHECK(half_payload_bytes(flag_fp16, 1) == 6);
  CHECK((flag_half
         & (flag_want_result | flag_only_changed | flag_subscribe | flag_replica
            | flag_placed))
        == 0);
}

TEST_CASE("16-bit payloads widen to what round_half gives, bitwise", "[half]") {
  for (uint16_t flag : {flag_bf16, flag_fp16}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{1024}}) {
      for (float magnitude : {1.0f, 1e-6f, 3e4f}) {
        INFO("flag " << flag << " n " << n << " magnitude " << magnitude);
        auto g = gradient(n, magnitude, static_cast<uint32_t>(n));
        std::vector<std::byte> payload(half_payload_bytes(flag, n));
        narrow_half(flag, g.data(), n, payload.data());
        std::vector<float> out(n, -1.0f);
        REQUIRE(widen_half(flag, payload.data(), payload.size(), out.data(), n).empty());
        auto ref = g;
        round_half(flag, ref.data(), n);
        CHECK(std::memcmp(ref.data(), out.data(), n * sizeof(float)) == 0);
        // Rounded, not copied: the 16-bit value keeps about 3 (bf16) or 4 (fp16)
        // significant digits.
        double worst = 0;
        for (size_t i = 0; i < n; ++i)
          worst = std::max(worst,
                           std::abs(double(out[i]) - g[i]) / std::abs(double(g[i])));
        CHECK(worst <= (flag == flag_bf16 ? 0x1p-8 : 0x1p-11));
        if (n == 1000)
          CHECK(worst > 0);
      }
    }
  }
}

TEST_CASE("a 16-bit payload that is not one is refused with the reason", "[half]") {
  std::vector<float> out(8);
  std::vector<std::byte> payload(64);
  CHECK_THAT(widen_half(0, payload.data(), 16, out.data(), 8),
             Catch::Contains("exactly one"));
  CHECK_THAT(widen_half(flag_half, payload.data(), 16, out.data(), 8),
             Catch::Contains("exactly one"));
  CHECK_THAT(widen_half(flag_bf16, payload.data(), 15, out.data(), 8),
             Catch::Contains("is 16 bytes"));
  CHECK_THAT(widen_half(flag_fp16, payload.data(), 16, out.data(), 8),
             Catch::Contains("is 20 bytes"));
  for (float scale : {0.0f, -1.0f, 3.0f, 1e-40f, INFINITY, NAN, 0.75f}) {
    INFO(scale);
    std::memcpy(payload.data(), &scale, sizeof scale);
    CHECK_THAT(widen_half(flag_fp16, payload.data(), 20, out.data(), 8),
               Catch::Contains("not a normal power of two"));
  }
  for (float scale : {1.0f, 0x1p-126f, 0x1p127f, 0.5f}) {
    std::memcpy(payload.data(), &scale, sizeof scale);
    CHECK(widen_half(flag_fp16, payload.data(), 20, out.data(), 8).empty());
  }
}

} // namespace rw_unit_half
