// In-node balancing end to end: a skewed job (every weight on one shard, every bias on
// the other) on a node of two shards. Its chunks move to the idle shard while it runs,
// and every result stays bitwise the rank-order sum (rw-bench --verify); periodic
// checkpoints taken across the move hold every chunk once, at their clock; with
// --no-balance nothing moves. And a job's shards (--job-kib-per-shard,
// logic/shard_set.hpp): a small job is served by one shard, the balancer widens it when
// it gets busy, and a second small job goes to the shard the first left idle.

#include <filesystem>
#include <set>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "runtime/checkpoint/manifest.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/rack_cluster.hpp"
#include "apps/tools/subprocess.hpp"

namespace rw_integration_shard_balance {

using namespace rw;

namespace {

// rw-bench comm on the skewed job (--open-job unless `extra` says otherwise); its exit
// code and output. Up to 240 s: under ASan an iteration takes about 1 s alone and up to
// 4 s beside other heavy tests. The first move comes within a few seconds (3 samples of
// 100 ms in a row, read from the shards' CPU clocks, runtime/thread_cpu.hpp), in the
// first iterations: the runs are a few times that long, and every iteration after the
// move is verified bitwise.
std::pair<int, std::string> skewed_run(const std::string& address, uint32_t iters,
                                       std::vector<std::string> extra = {"--open-job"}) {
  std::vector<std::string> argv{RW_BENCH_PATH,   "comm",
                                "--connect",     address,
                                "--workers",     "4",
                                "--bytes",       "16MiB",
                                "--layers",      "16",
                                "--chunk-bytes", "1MiB",
                                "--iters",       std::to_string(iters),
                                "--verify"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  tools::subprocess bench{argv, true};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  auto text = bench.read_all(deadline);
  auto rc = bench.wait_until(deadline);
  return {rc.value_or(-1), text};
}

} // namespace

TEST_CASE("a skewed job's chunks move to the idle shard, bitwise",
          "[integration][balance]") {
  testing::node_process node{{"--shards", "2", "--no-pin", "--balance-ms", "100"}};
  auto [rc, out] = skewed_run(node.address(), 16);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  INFO(node.log());
  CHECK(node.wait_for_log("moved from shard 0 (busy"));
  CHECK(node.wait_for_log("to shard 1 (busy"));
}

TEST_CASE("with --no-balance chunks stay", "[integration][balance]") {
  // As long a run as a balancing node moves chunks in (above), several times over.
  testing::node_process node{{"--shards", "2", "--no-pin", "--no-balance"}};
  auto [rc, out] = skewed_run(node.address(), 10);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  CHECK(node.log().find("balance: job") == std::string::npos);
}

TEST_CASE("periodic checkpoints stay whole while chunks move between shards",
          "[integration][balance]") {
  namespace fs = std::filesystem;
  testing::rack_cluster c{{"a"}, {"--shards", "2", "--no-pin", "--balance-ms", "100"}};
  auto dir = testing::temp_path("balance-ckpt");
  auto [rc, out] = skewed_run(c.nodes[0]->address(), 24,
                              {"--checkpoint-every", "4", "--checkpoint-dir", dir});
  INFO(out);
  // On a failure, what the node and the coordinator said last (their whole debug logs
  // would bury it).
  INFO("node, last 6000 characters:\n" << c.nodes[0]->log_tail(6000));
  INFO("coordinator, last 3000 characters:\n" << c.coordinator.log_tail(3000));
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  REQUIRE(c.nodes[0]->wait_for_log("moved from shard 0 (busy"));
  // Every checkpoint taken, before the move and after it, holds each of the job's 32
  // chunks once, all at its clock. Taken: the coordinator wrote its manifest. The last
  // one, 24, too, though the benchmark deletes the job as soon as its workers are done:
  // the node reports the job's end only once its checkpoint files are written. (It did
  // not wait: under a CPU hog (tests/stress.sh) the file of clock 20 was written after
  // the job had been deleted, and that checkpoint had no manifest.)
  REQUIRE(c.coordinator.wait_for_log(fmt::format("/clock-{:010}' clock=24", 24),
                                     std::chrono::seconds(30)));
  std::set<uint64_t> clocks;
  for (auto& e : fs::directory_iterator(dir)) {
    INFO(e.path());
    if (!fs::exists(e.path() / runtime::checkpoint::manifest_name))
      continue;
    auto m = runtime::checkpoint::read_manifest(e.path().string());
    std::set<std::pair<uint32_t, uint32_t>> seen;
    size_t records = 0;
    for (auto& f : m.files) {
      auto file = runtime::checkpoint::read_chunk_file(e.path().string(), m, f);
      for (auto& r : file.chunks) {
        CHECK(r.version == m.clock);
        seen.insert({r.tensor, r.chunk});
        ++records;
      }
    }
    CHECK(records == 32);
    CHECK(seen.size() == 32);
    clocks.insert(m.clock);
  }
  for (uint64_t clock = 4; clock <= 24; clock += 4)
    CHECK(clocks.count(clock) == 1);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("a job narrowed to one shard is widened by the balancer once busy, bitwise",
          "[integration][balance]") {
  // 16 MiB of parameters, a shard per 16 MiB: one shard, until it gets busy.
  testing::node_process node{
    {"--shards", "2", "--no-pin", "--balance-ms", "100", "--job-kib-per-shard", "16384"}};
  INFO(node.log_tail(4000));
  CHECK(node.wait_for_log("job shards: a shard per 16384 KiB"));
  auto [rc, out] = skewed_run(node.address(), 16);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("verified: yes") != std::string::npos);
  CHECK(node.wait_for_log("shards=1 of 2 ("));
  CHECK(node.wait_for_log("chunks_per_shard=[32,0]"));
  CHECK(node.wait_for_log("moved from shard 0 (busy"));
  CHECK(node.wait_for_log("to shard 1 (busy"));
}

TEST_CASE("small jobs are served by one shard each, the least loaded, bitwise",
          "[integration][job_shards]") {
  testing::node_process node{
    {"--shards", "2", "--no-pin", "--no-balance", "--job-kib-per-shard", "64"}};
  // 64 KiB in 4 chunks: one shard. The first job's 20,000 steps (seconds here, tens of
  // seconds under ASan) outlast the start of the second, which comes while the first
  // holds shard 0.
  auto run = [&](const std::string& iters) {
    return tools::subprocess{{RW_BENCH_PATH, "comm", "--connect", node.address(),
                              "--open-job", "--workers", "2", "--bytes", "64KiB",
                              "--chunk-bytes", "16KiB", "--iters", iters, "--verify"},
                             true};
  };
  auto first = run("20000");
  REQUIRE(node.wait_for_log("chunks_per_shard=[4,0]", std::chrono::seconds(60)));
  auto mark = node.log().size();
  auto second = run("20");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  auto second_out = second.read_all(deadline);
  auto second_rc = second.wait_until(deadline);
  auto second_created = node.log().substr(mark);
  auto first_out = first.read_all(deadline);
  auto first_rc = first.wait_until(deadline);
  INFO(first_out);
  INFO(second_out);
  INFO(node.log_tail(4000));
  REQUIRE(second_rc.value_or(-1) == 0);
  REQUIRE(first_rc.value_or(-1) == 0);
  CHECK(second_out.find("verified: yes") != std::string::npos);
  CHECK(first_out.find("verified: yes") != std::string::npos);
  // The second job's line: the shard the first left idle (had the first ended already,
  // both shards would be idle and shard 0 chosen by its index).
  auto line = second_created.find("job created");
  REQUIRE(line != std::string::npos);
  CHECK(second_created.find("chunks_per_shard=[0,4]", line) != std::string::npos);
}

TEST_CASE("a node of fewer than 8 shards serves every job by every shard (auto)",
          "[integration][job_shards]") {
  testing::node_process node{{"--shards", "2", "--no-pin"}};
  INFO(node.log_tail(4000));
  CHECK(node.wait_for_log(
    "job shards: auto: every job is served by every shard (fewer than 8 shards: 2)"));
}

} // namespace rw_integration_shard_balance
