// In-node balancing end to end: a skewed job (every weight on one shard, every bias on
// the other) on a node of two shards. Its chunks move to the idle shard while it runs,
// and every result stays bitwise the rank-order sum (rw-bench --verify); with
// --no-balance nothing moves.

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/integration/node_process.hpp"

using namespace rw;

namespace {

// rw-bench comm on the skewed job; its exit code and output.
std::pair<int, std::string> skewed_run(const std::string& address, uint32_t iters) {
  std::vector<std::string> argv{RW_BENCH_PATH, "comm", "--connect", address, "--open-job",
                                "--workers", "4", "--bytes", "16MiB", "--layers", "16",
                                "--chunk-bytes", "1MiB", "--iters", std::to_string(iters),
                                "--verify"};
  tools::subprocess bench{argv, true};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto text = bench.read_all(deadline);
  auto rc = bench.wait_until(deadline);
  return {rc.value_or(-1), text};
}

} // namespace

TEST_CASE("a skewed job's chunks move to the idle shard, bitwise", "[integration][balance]") {
  testing::node_process node{{"--shards", "2", "--no-pin", "--balance-ms", "100"}};
  auto [rc, out] = skewed_run(node.address(), 80);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  INFO(node.log());
  CHECK(node.wait_for_log("moved from shard 0 (busy"));
  CHECK(node.wait_for_log("to shard 1 (busy"));
}

TEST_CASE("with --no-balance chunks stay", "[integration][balance]") {
  testing::node_process node{{"--shards", "2", "--no-pin", "--no-balance"}};
  auto [rc, out] = skewed_run(node.address(), 20);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  CHECK(node.log().find("balance: job") == std::string::npos);
}
