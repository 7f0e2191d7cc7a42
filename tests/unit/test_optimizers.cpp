// Optimizer steps against values computed by hand (see the comments), two steps each,
// so that state carried between steps (momentum, Adam moments) is checked too.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/kernels.hpp"

using namespace rw;
using runtime::apply_optimizer;

namespace {

struct one_param {
  float p = 1.0f, m = 0.0f, v = 0.0f;
  void step(const optimizer_spec& s, float grad_sum, uint64_t t) {
    apply_optimizer(s, 0.5f, t, &p, &grad_sum, {&m, &v}, 1);
  }
};

optimizer_spec spec(optimizer_kind k) {
  optimizer_spec s;
  s.kind = k;
  s.learning_rate = 0.1f;
  s.momentum = 0.9f;
  return s;
}

} // namespace

TEST_CASE("sum: parameters become the summed gradient", "[optimizer]") {
  float p[3] = {9, 9, 9}, g[3] = {1, -2, 0.5f};
  apply_optimizer(spec(optimizer_kind::sum), 0.25f, 1, p, g, {}, 3);
  CHECK(p[0] == 1.0f);
  CHECK(p[1] == -2.0f);
  CHECK(p[2] == 0.5f);
}

TEST_CASE("sgd with weight decay", "[optimizer]") {
  auto s = spec(optimizer_kind::sgd);
  s.weight_decay = 0.1f;
  one_param x;
  x.step(s, 2.0f, 1); // g = 2 * 0.5 + 0.1 * 1 = 1.1; p = 1 - 0.11
  CHECK(x.p == Approx(0.89f).epsilon(1e-6));
  x.step(s, 2.0f, 2); // g = 1 + 0.089 = 1.089; p = 0.89 - 0.1089
  CHECK(x.p == Approx(0.7811f).epsilon(1e-6));
}

TEST_CASE("momentum", "[optimizer]") {
  one_param x;
  auto s = spec(optimizer_kind::momentum);
  x.step(s, 2.0f, 1); // g = 1; m = 1; p = 1 - 0.1
  CHECK(x.m == Approx(1.0f));
  CHECK(x.p == Approx(0.9f).epsilon(1e-6));
  x.step(s, 4.0f, 2); // g = 2; m = 0.9 + 2 = 2.9; p = 0.9 - 0.29
  CHECK(x.m == Approx(2.9f).epsilon(1e-6));
  CHECK(x.p == Approx(0.61f).epsilon(1e-6));
}

TEST_CASE("nesterov", "[optimizer]") {
  one_param x;
  auto s = spec(optimizer_kind::nesterov);
  x.step(s, 2.0f, 1); // g = 1; m = 1; p = 1 - 0.1 * (1 + 0.9)
  CHECK(x.p == Approx(0.81f).epsilon(1e-6));
  x.step(s, 4.0f, 2); // g = 2; m = 2.9; p = 0.81 - 0.1 * (2 + 2.61)
  CHECK(x.p == Approx(0.349f).epsilon(1e-5));
}

TEST_CASE("adam with bias correction", "[optimizer]") {
  one_param x;
  auto s = spec(optimizer_kind::adam);
  x.step(s, 2.0f, 1); // g = 1; m = 0.1, v = 0.001; corrected 1 and 1; p = 1 - 0.1
  CHECK(x.m == Approx(0.1f).epsilon(1e-6));
  // 1 - 0.999f is 0.0010000467 in float: 5e-5 off the decimal value.
  CHECK(x.v == Approx(0.001f).epsilon(1e-4));
  CHECK(x.p == Approx(0.9f).epsilon(1e-6));
  x.step(s, 4.0f, 2);
  // g = 2; m = 0.29, v = 0.004999; m^ = 0.29 / 0.19, v^ = 0.004999 / 0.001999
  // p = 0.9 - 0.1 * m^ / (sqrt(v^) + 1e-8) = 0.803481799
  CHECK(x.p == Approx(0.803481799).epsilon(1e-5));
}

TEST_CASE("the default rescale averages over workers", "[optimizer]") {
  optimizer_spec s;
  CHECK(runtime::effective_rescale(s, 4) == 0.25f);
  s.rescale = 2.0f;
  CHECK(runtime::effective_rescale(s, 4) == 2.0f);
}

#include "runtime/layerwise.hpp"

namespace rw_unit_optimizers {

namespace {

// Runs a layer-wise step on a tensor split into one-element chunks, as shards would.
std::vector<float> layerwise_step(optimizer_spec s, std::vector<float> w,
                                  const std::vector<float>& g) {
  size_t n = w.size();
  std::vector<float> m(n), v(n), d(n);
  runtime::norm_parts total;
  for (size_t c = 0; c < n; ++c) { // phase 1, chunk by chunk
    auto part = runtime::layerwise_prepare(s, 1.0f, 1, &w[c], &g[c],
                                           {&m[c], &v[c], &d[c]}, 1);
    total.w2 += part.w2;
    total.d2 += part.d2;
  }
  float trust = runtime::layerwise_trust(s, total);
  for (size_t c = 0; c < n; ++c) // phase 2
    runtime::layerwise_apply(s, trust, &w[c], {&m[c], &v[c], &d[c]}, 1);
  return w;
}

} // namespace

TEST_CASE("lamb scales Adam's direction by ||w|| / ||direction|| of the whole tensor",
          "[optimizer]") {
  auto s = spec(optimizer_kind::lamb); // lr 0.1, no weight decay
  // Step 1: Adam's direction is g/|g| = [1, 1] (up to epsilon); ||w|| = 5; trust 5/sqrt 2.
  auto w = layerwise_step(s, {3.0f, 4.0f}, {1.0f, 1.0f});
  CHECK(w[0] == Approx(3.0 - 0.1 * 5.0 / std::sqrt(2.0)).epsilon(1e-6));
  CHECK(w[1] == Approx(4.0 - 0.1 * 5.0 / std::sqrt(2.0)).epsilon(1e-6));
}

TEST_CASE("lars scales momentum SGD by eta ||w|| / ||g|| of the whole tensor",
          "[optimizer]") {
  auto s = spec(optimizer_kind::lars); // lr 0.1, momentum 0.9, eta 0.001
  // ||w|| = 5, ||g|| = 1: trust 0.005; m = 0.1 * 0.005 * g; w -= m.
  auto w = layerwise_step(s, {3.0f, 4.0f}, {0.6f, 0.8f});
  CHECK(w[0] == Approx(3.0 - 0.0005 * 0.6).epsilon(1e-7));
  CHECK(w[1] == Approx(4.0 - 0.0005 * 0.8).epsilon(1e-7));
  // Zero weights: the ratio falls back to 1 instead of freezing the layer.
  runtime::norm_parts zero{0.0, 1.0};
  CHECK(runtime::layerwise_trust(s, zero) == 1.0f);
}

TEST_CASE("lamb and lars need bsp", "[optimizer]") {
  job_spec j;
  j.name = "j";
  j.tensors = {{"t", 4, false}};
  j.optimizer.kind = optimizer_kind::lamb;
  j.consistency = parse_consistency("ssp:1");
  CHECK_THAT(validate(j, 1 << 20, 8), Catch::Contains("need bsp"));
  j.consistency = parse_consistency("bsp");
  CHECK(validate(j, 1 << 20, 8).empty());
}

} // namespace rw_unit_optimizers
