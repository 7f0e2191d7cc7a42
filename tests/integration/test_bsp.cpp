// Multi-process BSP on 127.0.0.1: W worker processes run the fixture job through one
// rw-node; every worker's final parameters must be bitwise what one process gets by
// summing the same gradients in rank order and applying the same optimizer.

#include <cstring>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "runtime/chunking.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "tests/integration/node_process.hpp"
#include "tests/tools/fixture_job.hpp"

using namespace rw;

namespace {

constexpr uint32_t steps = 3;

std::vector<float> reference(const job_spec& spec, uint32_t t, uint32_t workers) {
  auto n = spec.tensors[t].elements;
  auto params = spec.tensors[t].has_init ? testing::fixture_init(t, n) : std::vector<float>(n);
  std::vector<float> m(n), v(n), d(n);
  auto rescale = runtime::effective_rescale(spec.optimizer, workers);
  runtime::chunk_layout layout{n, spec.chunk_bytes};
  for (uint32_t s = 0; s < steps; ++s) {
    auto sum = testing::fixture_gradient(0, s, t, n);
    for (uint32_t r = 1; r < workers; ++r) {
      auto g = testing::fixture_gradient(r, s, t, n);
      runtime::sum_into(sum.data(), g.data(), n);
    }
    if (!runtime::is_layerwise(spec.optimizer.kind)) {
      runtime::apply_optimizer(spec.optimizer, rescale, s + 1, params.data(), sum.data(),
                               {m.data(), v.data()}, n);
      continue;
    }
    // Layer-wise: prepare every chunk, add the norms in chunk order, then apply.
    runtime::norm_parts total;
    for (uint32_t c = 0; c < layout.count(); ++c) {
      auto o = layout.offset(c);
      auto part = runtime::layerwise_prepare(spec.optimizer, rescale, s + 1, params.data() + o,
                                             sum.data() + o, {m.data() + o, v.data() + o, d.data() + o},
                                             layout.length(c));
      total.w2 += part.w2;
      total.d2 += part.d2;
    }
    auto trust = runtime::layerwise_trust(spec.optimizer, total);
    for (uint32_t c = 0; c < layout.count(); ++c) {
      auto o = layout.offset(c);
      runtime::layerwise_apply(spec.optimizer, trust, params.data() + o,
                               {m.data() + o, v.data() + o, d.data() + o}, layout.length(c));
    }
  }
  return params;
}

// Runs W rw-test-worker processes; returns each one's output file contents.
std::vector<std::string> run_workers(const std::string& address, const std::string& job,
                                     uint32_t workers, optimizer_kind kind,
                                     const std::string& transport) {
  std::vector<tools::subprocess> procs;
  std::vector<std::string> outs;
  for (uint32_t r = 0; r < workers; ++r) {
    outs.push_back(testing::temp_path(fmt::format("{}-{}.bin", job, r)));
    procs.emplace_back(std::vector<std::string>{RW_TEST_WORKER_PATH, "--connect", address,
                                                "--job", job, "--rank", std::to_string(r),
                                                "--workers", std::to_string(workers),
                                                "--optimizer", to_string(kind), "--steps",
                                                std::to_string(steps), "--out", outs.back(),
                                                "--transport", transport},
                       false);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<std::string> results;
  for (uint32_t r = 0; r < workers; ++r) {
    auto rc = procs[r].wait_until(deadline);
    INFO("worker " << r);
    REQUIRE(rc.has_value());
    REQUIRE(*rc == 0);
    results.push_back(testing::read_file(outs[r]));
    std::remove(outs[r].c_str());
  }
  return results;
}

} // namespace

// One protocol suite, instantiated per transport.
TEST_CASE("BSP push_pull is bitwise the single-process reference", "[integration][bsp]") {
  testing::node_process node;
  for (std::string transport : {"tcp", "shm"})
  for (uint32_t workers : {1u, 2u, 4u}) {
    for (auto kind : {optimizer_kind::sum, optimizer_kind::sgd, optimizer_kind::momentum,
                      optimizer_kind::nesterov, optimizer_kind::adam, optimizer_kind::lamb,
                      optimizer_kind::lars}) {
      DYNAMIC_SECTION(transport << ", " << workers << " workers, " << to_string(kind)) {
        auto job = fmt::format("bsp-{}-{}-{}", transport, workers, to_string(kind));
        auto spec = testing::fixture_job(job, workers, kind);
        std::string expect;
        for (uint32_t t = 0; t < spec.tensors.size(); ++t) {
          auto ref = reference(spec, t, workers);
          expect.append(reinterpret_cast<const char*>(ref.data()), ref.size() * sizeof(float));
        }
        auto results = run_workers(node.address(), job, workers, kind, transport);
        for (uint32_t r = 0; r < workers; ++r) {
          INFO("rank " << r);
          REQUIRE(results[r].size() == expect.size());
          CHECK(std::memcmp(results[r].data(), expect.data(), expect.size()) == 0);
        }
        // One log line per job lifecycle event, with its ids.
        CHECK(node.wait_for_log(fmt::format("job created: job='{}'", job)));
        CHECK(node.wait_for_log(fmt::format("job finished: job='{}'", job)));
      }
    }
  }
}
