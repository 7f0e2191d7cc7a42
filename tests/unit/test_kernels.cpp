#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/kernels.hpp"

namespace rw_unit_kernels {

TEST_CASE("sum_into adds element-wise for any length", "[kernels]") {
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 1023u, 8192u}) {
    std::vector<float> acc(n), x(n);
    for (size_t i = 0; i < n; ++i) {
      acc[i] = static_cast<float>(i) * 0.5f;
      x[i] = 1.0f - static_cast<float>(i);
    }
    rw::runtime::sum_into(acc.data(), x.data(), n);
    for (size_t i = 0; i < n; ++i)
      REQUIRE(acc[i] == static_cast<float>(i) * 0.5f + (1.0f - static_cast<float>(i)));
  }
}

TEST_CASE("optimizers declare the state they need", "[kernels]") {
  using rw::optimizer_kind;
  CHECK(rw::runtime::state_arrays(optimizer_kind::sum) == 0);
  CHECK(rw::runtime::state_arrays(optimizer_kind::sgd) == 0);
  CHECK(rw::runtime::state_arrays(optimizer_kind::momentum) == 1);
  CHECK(rw::runtime::state_arrays(optimizer_kind::nesterov) == 1);
  CHECK(rw::runtime::state_arrays(optimizer_kind::adam) == 2);
}

namespace {

std::vector<float> pseudo_random(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(static_cast<int32_t>(x >> 32)) / 2147483648.0f;
  }
  return v;
}

} // namespace

namespace {

// Runs every optimizer through `isa`'s kernels and the scalar ones: bitwise equal. A CPU
// without `isa` says SKIPPED (ctest marks the test skipped: tests/CMakeLists.txt), so
// a run never passes by comparing scalar with scalar.
void check_bitwise_against_scalar(const std::string& isa) {
  using rw::optimizer_kind;
  auto isas = rw::runtime::supported_isas();
  if (std::find(isas.begin(), isas.end(), isa) == isas.end()) {
    std::cout << "SKIPPED: this CPU has no " << isa << " (it has " << isas.size()
              << " instruction set(s) RackWeave can use)\n";
    return;
  }
  auto& scalar = rw::runtime::kernels_for("scalar");
  auto& k = rw::runtime::kernels_for(isa);
  for (auto kind : {optimizer_kind::sum, optimizer_kind::sgd, optimizer_kind::momentum,
                    optimizer_kind::nesterov, optimizer_kind::adam}) {
    for (size_t n : {1u, 15u, 1000u, 8193u}) {
      for (size_t offset : {0u, 1u}) { // unaligned starts too
        INFO(isa << " " << rw::to_string(kind) << " n=" << n << " +" << offset);
        rw::optimizer_spec s;
        s.kind = kind;
        s.weight_decay = 0.01f;
        auto acc = pseudo_random(n + offset, 1), last = pseudo_random(n + offset, 2);
        std::vector<float> p[2], m[2], v[2];
        for (int j = 0; j < 2; ++j) {
          p[j] = pseudo_random(n + offset, 3);
          m[j] = pseudo_random(n + offset, 4);
          v[j] = pseudo_random(n + offset, 5);
          for (auto& x : v[j])
            x = x * x; // second moments are non-negative
        }
        for (uint64_t step = 1; step <= 3; ++step) {
          scalar.step(s, 0.25f, step, p[0].data() + offset, acc.data() + offset,
                      last.data() + offset, {m[0].data() + offset, v[0].data() + offset},
                      n);
          k.step(s, 0.25f, step, p[1].data() + offset, acc.data() + offset,
                 last.data() + offset, {m[1].data() + offset, v[1].data() + offset}, n);
        }
        REQUIRE(std::memcmp(p[0].data(), p[1].data(), p[0].size() * 4) == 0);
        REQUIRE(std::memcmp(m[0].data(), m[1].data(), m[0].size() * 4) == 0);
        REQUIRE(std::memcmp(v[0].data(), v[1].data(), v[0].size() * 4) == 0);
      }
    }
  }
}

} // namespace

TEST_CASE("avx2 kernels give bitwise the scalar result", "[kernels]") {
  check_bitwise_against_scalar("avx2");
}

TEST_CASE("avx512 kernels give bitwise the scalar result", "[kernels]") {
  check_bitwise_against_scalar("avx512");
}

TEST_CASE("the fused step equals a sum then a step", "[kernels]") {
  rw::optimizer_spec s;
  s.kind = rw::optimizer_kind::adam;
  auto acc = pseudo_random(777, 7), last = pseudo_random(777, 8);
  std::vector<float> p1(777, 0.5f), p2(777, 0.5f), m1(777), m2(777), v1(777), v2(777);
  auto& k = rw::runtime::kernels();
  k.step(s, 0.5f, 1, p1.data(), acc.data(), last.data(), {m1.data(), v1.data()}, 777);
  auto sum = acc;
  k.sum_into(sum.data(), last.data(), 777);
  k.step(s, 0.5f, 1, p2.data(), sum.data(), nullptr, {m2.data(), v2.data()}, 777);
  CHECK(std::memcmp(p1.data(), p2.data(), 777 * 4) == 0);
}

TEST_CASE("kernel selection refuses unknown instruction sets", "[kernels]") {
  CHECK_THROWS_WITH(rw::runtime::select_kernels("neon"), Catch::Contains("unknown"));
  CHECK(rw::runtime::supported_isas().front() == "scalar");
  rw::runtime::select_kernels("scalar");
  CHECK(std::string(rw::runtime::kernels().isa) == "scalar");
  rw::runtime::select_kernels("auto");
  CHECK(std::string(rw::runtime::kernels().isa) == rw::runtime::supported_isas().back());
}

TEST_CASE("kernels run only where the CPU has every feature they are built for",
          "[kernels]") {
  using rw::runtime::cpu_features;
  CHECK(cpu_features("scalar").empty());
  CHECK(cpu_features("avx2") == std::vector<std::string>{"avx2"});
  // kernels_avx512.cpp is built with -mavx512f -mavx512dq: avx512f alone is not enough.
  CHECK(cpu_features("avx512") == std::vector<std::string>{"avx512f", "avx512dq"});
  __builtin_cpu_init();
  for (auto& isa : rw::runtime::supported_isas())
    if (isa == "avx512") {
      CHECK(__builtin_cpu_supports("avx512f"));
      CHECK(__builtin_cpu_supports("avx512dq"));
    }
}

} // namespace rw_unit_kernels
