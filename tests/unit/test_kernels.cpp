#include <vector>

#include <catch2/catch.hpp>

#include "runtime/kernels.hpp"

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
