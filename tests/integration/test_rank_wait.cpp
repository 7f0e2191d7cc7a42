// rw.job_status reports, per rank, the time its requests waited on the node: a BSP
// job whose rank 1 is slow makes rank 0 wait at every step, and rank 1 hardly at all.

#include <cstdio>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/test_worker.hpp"

namespace rw_integration_rank_wait {

using namespace rw;

TEST_CASE("per-rank wait_ms: the rank that waits for a slow one shows it, the slow one "
          "does not",
          "[integration][cluster][status]") {
  testing::node_process node{{}, {"rack-agg", false, {}}};
  auto shell = [&](const std::string& code) {
    return testing::run_shell({"--connect", node.address(), "-c", code});
  };
  // The test worker's fixture job (its spec must match the grant's).
  auto made = shell(
    "local j = rw.job_create{name = 'paced', workers = 2, optimizer = 'sum', "
    "lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB'}; "
    "print(j.token)");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto token = made.out.substr(0, made.out.find('\n'));
  constexpr uint32_t steps = 6, delay_ms = 150;
  std::vector<std::unique_ptr<testing::worker_process>> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    auto a = testing::worker_args::of(node.address(), "paced", r, token);
    a.steps = steps;
    a.hold_ms = 3000;
    if (r == 1) // the slow one: it sleeps before each step, rank 0 waits for it
      a.step_delay_ms = delay_ms;
    workers.push_back(testing::start_worker(a));
  }
  // While both still hold the job (--hold-ms), ask for its status.
  std::string status;
  for (int i = 0; i < 100; ++i) { // at most ~20 s
    auto s = shell(
      "local j = rw.job_status('paced'); local a, b = j.ranks[1], j.ranks[2]; "
      "print(a.clock, b.clock, a.wait_ms, b.wait_ms)");
    if (s.code == 0 && s.out.rfind(fmt::format("{}\t{}\t", steps, steps), 0) == 0) {
      status = s.out;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO(status);
  REQUIRE(!status.empty());
  double wait0 = 0, wait1 = 0;
  unsigned c0 = 0, c1 = 0;
  REQUIRE(std::sscanf(status.c_str(), "%u\t%u\t%lf\t%lf", &c0, &c1, &wait0, &wait1) == 4);
  // Rank 0 waited for rank 1's delay at every step after the first (summed over its
  // chunks, so at least the delays themselves).
  CHECK(wait0 >= (steps - 1) * delay_ms * 0.8);
  CHECK(wait1 < wait0 / 4);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (auto& w : workers)
    CHECK(testing::finish(*w, deadline).first == std::optional<int>{0});
}

} // namespace rw_integration_rank_wait
