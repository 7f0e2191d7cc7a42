// rw-bench comm with a straggler under each consistency model, on a real node: the
// staleness bound is a hard property (timing-independent); BSP serves nothing stale.

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/bench_json.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"

namespace rw_integration_consistency_bench {

using namespace rw;

namespace {

struct bench_line {
  std::string json;
  int exit = -1;
};

bench_line run_bench(const std::string& address, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{RW_BENCH_PATH, "comm", "--connect", address,
                                "--workers",   "3",    "--bytes",   "256KiB",
                                "--iters",     "8",    "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  tools::subprocess p{argv, true};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bench_line out;
  out.json = p.read_all(deadline);
  auto rc = p.wait_until(deadline);
  out.exit = rc ? *rc : -1;
  return out;
}

long field(const std::string& json, const std::string& name) {
  return testing::bench_json(json).at(name).get<long>();
}

std::vector<long> list_field(const std::string& json, const std::string& name) {
  return testing::bench_json(json).at(name).get<std::vector<long>>();
}

std::vector<double> real_list_field(const std::string& json, const std::string& name) {
  return testing::bench_json(json).at(name).get<std::vector<double>>();
}

} // namespace

TEST_CASE("rw-bench comm: staleness stays within the model's bound under a straggler",
          "[integration][consistency]") {
  testing::node_process node;
  auto bsp = run_bench(node.address(), {"--consistency", "bsp", "--straggler", "1:50ms"});
  INFO(bsp.json);
  REQUIRE(bsp.exit == 0);
  CHECK(field(bsp.json, "max_staleness") == 0);
  // What makes it BSP (and this half able to fail): every rank does the same steps, and
  // the fast ranks wait for the straggler's 50 ms in every push_pull, the straggler not
  // (50, not 20: under ASan a fast rank's own step can come near 20 ms).
  CHECK(list_field(bsp.json, "iterations") == std::vector<long>{9, 9, 9});
  auto bsp_wait = real_list_field(bsp.json, "mean_wait_ms");
  REQUIRE(bsp_wait.size() == 3);
  CHECK(bsp_wait[0] >= 10.0);
  CHECK(bsp_wait[2] >= 10.0);
  CHECK(bsp_wait[1] < bsp_wait[0]);

  // Async, end to end: nobody waits for the straggler, so the others do more steps in
  // the time it does its 8.
  auto async = run_bench(node.address(),
                         {"--consistency", "async", "--straggler", "1:50ms"});
  INFO(async.json);
  REQUIRE(async.exit == 0);
  auto async_its = list_field(async.json, "iterations");
  REQUIRE(async_its.size() == 3);
  CHECK(async_its[1] == 9);
  CHECK(async_its[0] > async_its[1]);
  CHECK(async_its[2] > async_its[1]);

  auto ssp = run_bench(node.address(),
                       {"--consistency", "ssp:2", "--straggler", "1:50ms"});
  INFO(ssp.json);
  REQUIRE(ssp.exit == 0);
  CHECK(field(ssp.json, "max_staleness") <= 2);
  auto its = list_field(ssp.json, "iterations");
  REQUIRE(its.size() == 3);
  CHECK(its[1] == 9); // the straggler paces the run: 8 iterations after 1 warm-up
  for (auto n : its)
    CHECK(n <= its[1] + 3); // nobody gets further ahead than the bound allows

  auto bad = run_bench(node.address(), {"--consistency", "ssp:-1"});
  CHECK(bad.exit == 2);
  auto bad_straggler = run_bench(node.address(), {"--straggler", "7:10ms"});
  CHECK(bad_straggler.exit == 2);
}

// The protocol suite's SSP and async instance: the same bounds over every transport.
TEST_CASE("SSP and async keep their bounds over every transport",
          "[integration][consistency]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    DYNAMIC_SECTION(transport) {
      auto ssp = run_bench(node.address(), {"--transport", transport, "--consistency",
                                            "ssp:2", "--straggler", "1:20ms"});
      INFO(ssp.json);
      REQUIRE(ssp.exit == 0);
      CHECK(field(ssp.json, "max_staleness") <= 2);
      auto its = list_field(ssp.json, "iterations");
      REQUIRE(its.size() == 3);
      for (auto n : its)
        CHECK(n <= its[1] + 3);
      auto async = run_bench(node.address(),
                             {"--transport", transport, "--consistency", "async"});
      INFO(async.json);
      REQUIRE(async.exit == 0);
      CHECK(list_field(async.json, "iterations").size() == 3);
    }
  }
}

} // namespace rw_integration_consistency_bench
