// Shard failover on 127.0.0.1: rw.inject crashes a shard of a job's node mid-training;
// its NUMA supervisor restarts it with its chunks' state, the node's pollers ask the
// workers to re-send what the dead shard had not answered, and every worker ends
// bitwise at the single-process reference (the fault-free run's parameters): over
// shared memory and TCP on one node, on two nodes (flat), twice in a row. A layer-wise
// job, whose shards exchange messages the crash may have lost, fails with that reason;
// bad injections are clear errors; a checkpoint the crash interrupts fails at once.

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/job_options.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_shard_failover {

using namespace rw;

namespace {

using testing::rack_cluster;

using run = testing::worker_process;

// A worker of 20 steps that waits after step `hold` until the file `held` exists.
std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, uint32_t workers, const std::string& optimizer,
                           const std::string& token, const std::string& transport,
                           uint32_t hold, const std::string& held) {
  auto a = testing::worker_args::of(connect, job, rank, token);
  a.workers = workers;
  a.optimizer = optimizer;
  a.steps = 20;
  a.transport = transport;
  a.step_delay_ms = 80;
  a.extra = {"--pause-at", std::to_string(hold), "--resume-file", held};
  return testing::start_worker(a);
}

// Runs the job's workers (20 steps); once the job is at clock 3 (and again at 10 with
// `twice`) crashes shard `shard` of node `node`. The workers wait three steps past the
// last crash's clock until it was injected, so it lands before the job ends however
// slow the machine (under ASan the job once finished before the second injection).
// Returns each worker's exit code and output.
std::vector<std::pair<std::optional<int>, std::string>> crash_mid_job(
  rack_cluster& c, const std::vector<std::string>& connect, const std::string& job,
  const std::string& optimizer, const std::string& transport, const std::string& node,
  uint32_t shard, bool twice) {
  std::string err;
  auto token = c.create(
    job, static_cast<uint32_t>(connect.size()), optimizer,
    node.empty() ? "node = 'n0'" : "racks = {'a', 'b'}, reduction = 'flat'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto clocks = twice ? std::vector<int>{3, 10} : std::vector<int>{3};
  auto held = testing::temp_path("held");
  std::vector<std::unique_ptr<run>> ws;
  for (uint32_t r = 0; r < connect.size(); ++r)
    ws.push_back(start(connect[r], job, r, static_cast<uint32_t>(connect.size()),
                       optimizer, token, transport,
                       static_cast<uint32_t>(clocks.back() + 3), held));
  for (int clock : clocks) {
    auto inj = c.shell(
      fmt::format("rw.wait('{}', {}, {{timeout = 30}}); "
                  "print(rw.inject{{job = '{}', kill = 'shard', node = '{}', "
                  "shard = {}}})",
                  job, clock, job, node, shard));
    INFO(inj.err);
    CHECK_THAT(inj.out, Catch::Contains(fmt::format("crashed shard {}", shard)));
  }
  std::ofstream{held} << "go\n";
  std::vector<std::pair<std::optional<int>, std::string>> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (auto& w : ws) {
    auto text = w->proc->read_all(deadline);
    auto code = w->proc->wait_until(deadline);
    out.emplace_back(code, text + testing::read_file(w->err_path));
  }
  std::remove(held.c_str());
  return out;
}

void expect_verified(const std::vector<std::pair<std::optional<int>, std::string>>& runs,
                     const std::string& what) {
  for (size_t r = 0; r < runs.size(); ++r) {
    INFO(what << " rank " << r << ": " << runs[r].second);
    CHECK(runs[r].first == std::optional<int>{0});
    CHECK_THAT(runs[r].second, Catch::Contains("verified, bitwise the reference"));
  }
}

} // namespace

TEST_CASE("a crashed shard is restarted with its state: the job goes on bitwise",
          "[integration][failover]") {
  rack_cluster c{{"a", "b"}, testing::fabric_node_args()};
  auto a = c.nodes[0]->address();
  auto b = c.nodes[1]->address();
  for (const std::string& transport : testing::protocol_transports()) {
    auto job = "shard-" + transport;
    expect_verified(crash_mid_job(c, {a, a, a}, job, "adam", transport, "", 0, false),
                    job);
    CHECK(c.nodes[0]->wait_for_log("took over its predecessor's chunks: jobs [",
                                   std::chrono::seconds(5)));
    CHECK(c.nodes[0]->wait_for_log("asked to re-send", std::chrono::seconds(5)));
    auto s = c.shell("print(rw.wait('" + job + "', 'finished', {timeout = 30}).state)");
    CHECK(s.out == "finished\n");
  }
  expect_verified(
    crash_mid_job(c, {a, b, a}, "shard-flat", "momentum", "tcp", "n1", 0, true),
    "shard-flat");
  CHECK(c.nodes[1]->wait_for_log("(restart 2) took over", std::chrono::seconds(5)));
}

TEST_CASE("a layer-wise job whose shard crashed fails, saying why, bad injections",
          "[integration][failover]") {
  rack_cluster c{{"a"}};
  auto a = c.nodes[0]->address();
  auto runs = crash_mid_job(c, {a, a}, "shard-lamb", "lamb", "tcp", "", 0, false);
  for (auto& [code, text] : runs) {
    INFO(text);
    CHECK(code == std::optional<int>{2});
    CHECK_THAT(text, Catch::Contains("layer-wise optimizer's norm and trust messages"));
  }
  auto bad = [&](const std::string& args, const std::string& expect) {
    auto r = c.shell("rw.inject{" + args + "}");
    INFO(args << ": " << r.out << r.err);
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains(expect));
  };
  bad("job = 'nope', kill = 'shard'", "no job named 'nope'");
  bad("job = 'shard-lamb', kill = 'shard'", "has ended");
  std::string err;
  auto token = c.create("idle", 2, "sum", "node = 'n0'", &err);
  REQUIRE(!token.empty());
  bad("job = 'idle', kill = 'node'", "kill -9 it");
  bad("job = 'idle', kill = 'shard', node = 'n7'", "no live node named 'n7'");
  bad("job = 'idle', kill = 'shard'", "holds no live job"); // no worker has joined
}

TEST_CASE(
  "a shard crash during a checkpoint fails the checkpoint at once, the job goes on",
  "[integration][failover]") {
  rack_cluster c{{"a"}};
  auto a = c.nodes[0]->address();
  std::string err;
  auto token = c.create("ckpt-crash", 2, "adam", "node = 'n0'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  std::vector<std::unique_ptr<run>> ws;
  for (uint32_t r = 0; r < 2; ++r) {
    auto w = testing::worker_args::of(a, "ckpt-crash", r, token);
    w.optimizer = "adam";
    w.steps = 6;
    w.extra = {"--pause-at", "3", "--resume-file", resume, "--pause-limit-ms", "30000"};
    ws.push_back(testing::start_worker(w));
  }
  auto held = c.shell("rw.wait('ckpt-crash', 3, {timeout = 30}); print('held')");
  REQUIRE(held.out == "held\n");
  // Clock 5 is ahead of the held workers: the shards wait; then shard 0 crashes.
  auto dir = testing::temp_path("ckpt");
  auto shell_err = testing::temp_path("shell.err");
  tools::subprocess shell{{RW_SHELL_PATH, "--connect", c.coordinator.address(), "-c",
                           "rw.checkpoint('ckpt-crash', '" + dir + "', {clock = 5})"},
                          true,
                          shell_err};
  REQUIRE(c.nodes[0]->wait_for_log("checkpoint requested: job='ckpt-crash'",
                                   std::chrono::seconds(30)));
  auto inj = c.shell("print(rw.inject{job = 'ckpt-crash', kill = 'shard', shard = 0})");
  CHECK_THAT(inj.out, Catch::Contains("crashed shard 0"));
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::seconds(60);
  shell.read_all(deadline);
  auto code = shell.wait_until(deadline);
  CHECK(std::chrono::steady_clock::now() - t0
        < std::chrono::seconds(10)); // not the timeout
  CHECK(code.has_value());
  CHECK(code != std::optional<int>{0});
  CHECK_THAT(testing::read_file(shell_err),
             Catch::Contains("crashed while the checkpoint waited for its chunks"));
  std::ofstream{resume} << "go";
  for (size_t r = 0; r < ws.size(); ++r) {
    auto text = ws[r]->proc->read_all(deadline);
    auto rc = ws[r]->proc->wait_until(deadline);
    INFO("rank " << r << ": " << text << testing::read_file(ws[r]->err_path));
    CHECK(rc == std::optional<int>{0});
    CHECK_THAT(text, Catch::Contains("verified, bitwise the reference"));
  }
  std::remove(resume.c_str());
  std::remove(shell_err.c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

} // namespace rw_integration_shard_failover
