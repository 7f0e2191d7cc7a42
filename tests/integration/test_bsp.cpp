// Multi-process BSP on 127.0.0.1: W worker processes run the fixture job through one
// rw-node; every worker's final parameters must be bitwise what one process gets by
// summing the same gradients in rank order and applying the same optimizer.

#include <algorithm>
#include <cstring>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "runtime/chunking.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/test_worker.hpp"
#include "tests/tools/fixture_job.hpp"
#include "tests/tools/fixture_reference.hpp"

namespace rw_integration_bsp {

using namespace rw;

namespace {

constexpr uint32_t steps = 3;

// Runs W rw-test-worker processes; returns each one's output file contents.
std::vector<std::string> run_workers(const std::string& address, const std::string& job,
                                     uint32_t workers, optimizer_kind kind,
                                     const std::string& transport) {
  std::vector<std::unique_ptr<testing::worker_process>> procs;
  for (uint32_t r = 0; r < workers; ++r) {
    auto a = testing::worker_args::of(address, job, r);
    a.workers = workers;
    a.optimizer = to_string(kind);
    a.steps = steps;
    a.transport = transport;
    a.verify = false; // the test compares the parameters itself
    procs.push_back(testing::start_worker(a));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<std::string> results;
  for (uint32_t r = 0; r < workers; ++r) {
    auto [rc, out] = testing::finish(*procs[r], deadline);
    INFO("worker " << r << ": " << out);
    REQUIRE(rc.has_value());
    REQUIRE(*rc == 0);
    results.push_back(testing::read_file(procs[r]->out_path));
  }
  return results;
}

} // namespace

// One protocol suite, instantiated per transport.
// Every combination on one node, one job after another (INFO names the one that
// fails). As DYNAMIC_SECTIONs each of the 63 ran the test case again from the top, with
// a node of its own: under ASan, starting and stopping them was about half of its
// 148 s in CI.
TEST_CASE("BSP push_pull is bitwise the single-process reference", "[integration][bsp]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports())
    for (uint32_t workers : {1u, 2u, 4u}) {
      for (auto kind :
           {optimizer_kind::sum, optimizer_kind::sgd, optimizer_kind::momentum,
            optimizer_kind::nesterov, optimizer_kind::adam, optimizer_kind::lamb,
            optimizer_kind::lars}) {
        INFO(transport << ", " << workers << " workers, " << to_string(kind));
        {
          auto job = fmt::format("bsp-{}-{}-{}", transport, workers, to_string(kind));
          auto spec = testing::fixture_job(job, workers, kind);
          std::string expect;
          for (uint32_t t = 0; t < spec.tensors.size(); ++t) {
            auto ref = testing::fixture_reference(spec, t, workers, steps);
            expect.append(reinterpret_cast<const char*>(ref.data()),
                          ref.size() * sizeof(float));
          }
          auto results = run_workers(node.address(), job, workers, kind, transport);
          for (uint32_t r = 0; r < workers; ++r) {
            INFO("rank " << r);
            CHECK(results[r].size() == expect.size());
            CHECK((results[r].size() == expect.size()
                   && std::memcmp(results[r].data(), expect.data(), expect.size()) == 0));
          }
          // One log line per job lifecycle event, with its ids.
          CHECK(node.wait_for_log(fmt::format("job created: job='{}'", job)));
          CHECK(node.wait_for_log(fmt::format("job finished: job='{}'", job)));
        }
      }
    }
}

// The node's kernels forced with --kernels: each instruction set this CPU runs gives
// the same bits (the reference is scalar); one it lacks stops the node at start,
// saying so (shown SKIPPED where the CPU has every one).
TEST_CASE("kernels forced with --kernels: each instruction set bitwise the reference",
          "[integration][bsp][kernels]") {
  auto supported = runtime::supported_isas();
  for (const std::string isa : {"scalar", "avx2", "avx512"}) {
    DYNAMIC_SECTION(isa) {
      bool runs = std::find(supported.begin(), supported.end(), isa) != supported.end();
      if (!runs) {
        auto stopped = testing::node_that_stops({"--kernels", isa});
        INFO(stopped.log);
        CHECK(stopped.code.has_value());
        CHECK(stopped.code != std::optional<int>{0});
        CHECK_THAT(stopped.log,
                   Catch::Contains("this CPU cannot run the " + isa + " kernels"));
        continue;
      }
      testing::node_process node{{"--kernels", isa}};
      CHECK(node.wait_for_log(fmt::format("kernels={} ", isa)));
      for (auto kind : {optimizer_kind::adam, optimizer_kind::lamb}) {
        auto job = fmt::format("kernels-{}-{}", isa, to_string(kind));
        auto spec = testing::fixture_job(job, 2, kind);
        std::string expect;
        for (uint32_t t = 0; t < spec.tensors.size(); ++t) {
          auto ref = testing::fixture_reference(spec, t, 2, steps);
          expect.append(reinterpret_cast<const char*>(ref.data()),
                        ref.size() * sizeof(float));
        }
        auto results = run_workers(node.address(), job, 2, kind, "tcp");
        for (uint32_t r = 0; r < 2; ++r) {
          INFO(isa << ", " << to_string(kind) << ", rank " << r);
          REQUIRE(results[r].size() == expect.size());
          CHECK(std::memcmp(results[r].data(), expect.data(), expect.size()) == 0);
        }
      }
    }
  }
}

} // namespace rw_integration_bsp
