// Node failover from a periodic checkpoint on 127.0.0.1: a flat job over two nodes with
// checkpoint_every loses a node to kill -9 mid-training; the coordinator starts it
// again on the node left, from its newest complete checkpoint (a new id, the same name
// and token); the workers, told why, are started again (as a launcher would) and end
// bitwise at the single-process reference. A node declared dead that comes back
// (stopped, then continued) serves nothing of the job any more, and workers that say
// hello there are sent on to the job's new node. (A job without a checkpoint fails, naming the node:
// test_racks.cpp.)

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/rack_cluster.hpp"

namespace rw_integration_node_failover {

using namespace rw;

namespace {

using testing::rack_cluster;

using run = testing::worker_process;
using testing::finish;

// `held`: the worker waits after step 20 until that file exists, so the fault lands
// mid-training however slow the machine (a sanitizer build under load once finished
// all 40 steps before the kill).
std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, const std::string& token,
                           const std::string& held = {}) {
  std::vector<std::string> args{"--optimizer",     "adam", "--steps", "40",
                                "--step-delay-ms", "60"};
  if (!held.empty())
    args.insert(args.end(), {"--pause-at", "20", "--resume-file", held});
  return testing::start_verified(connect, job, rank, token, args);
}

// A flat job over both nodes with periodic checkpoints every `every` clocks, rank 0
// saying hello to n0 and rank 1 to n1, once every rank is at `clock` and a periodic
// checkpoint has been taken. Its directory is removed at the end.
struct checkpointed_job {
  std::string token;
  std::string dir = testing::temp_path("periodic");
  std::string held = testing::temp_path("held"); // its workers wait at step 20 for it
  std::vector<std::unique_ptr<run>> ws;
  void release() const { std::ofstream{held} << "go\n"; }
  ~checkpointed_job() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::remove(held, ec);
  }
};

void start_checkpointed(rack_cluster& c, checkpointed_job& j, const std::string& name,
                        uint32_t every, uint32_t clock) {
  std::string err;
  j.token = c.create(
    name, 2, "adam",
    fmt::format("racks = {{'a', 'b'}}, reduction = 'flat', replicas = 0, "
                "checkpoint_every = {}, checkpoint_dir = '{}'",
                every, j.dir),
    &err);
  INFO(err);
  REQUIRE(!j.token.empty());
  j.ws.push_back(start(c.nodes[0]->address(), name, 0, j.token, j.held));
  j.ws.push_back(start(c.nodes[1]->address(), name, 1, j.token, j.held));
  auto at = c.shell(
    fmt::format("rw.wait('{}', {}, {{timeout = 60}}); print('ok')", name, clock));
  INFO(at.err);
  REQUIRE(at.out == "ok\n");
  REQUIRE(c.coordinator.wait_for_log("periodic checkpoint taken: job='" + name + "'",
                                     std::chrono::seconds(10)));
}

} // namespace

TEST_CASE("a node killed mid-training: the job starts again from its checkpoint on the "
          "node left, bitwise",
          "[integration][failover]") {
  rack_cluster c{{"a", "b"}};
  auto a = c.nodes[0]->address();
  checkpointed_job job;
  start_checkpointed(c, job, "survivor", 3, 8);
  auto& ws = job.ws;
  auto& token = job.token;
  auto at = c.shell("print(rw.job_status('survivor').id)");
  REQUIRE(at.code == 0);
  c.nodes[1]->process().signal(SIGKILL);
  job.release();       // on from step 20 at the latest, into the dead node
  for (auto& w : ws) { // told why, they stop; a launcher starts them again
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{2});
  }
  REQUIRE(
    c.coordinator.wait_for_log("job restarts: job='survivor'", std::chrono::seconds(10)));
  auto status = c.shell("local j = rw.job_status('survivor'); print(j.state, j.id ~= "
                        + at.out.substr(0, at.out.find('\n'))
                        + ", #j.nodes, j.nodes[1])");
  INFO(status.err);
  CHECK(status.out == "created\ttrue\t1\tn0\n");
  ws.clear();
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(a, "survivor", r, token)); // the same token
  for (auto& w : ws) {
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{0});
    CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
    CHECK_THAT(out, Catch::Contains("resumes at clock"));
  }
  auto done = c.shell("print(rw.wait('survivor', 'finished', {timeout = 30}).state)");
  CHECK(done.out == "finished\n");
}

TEST_CASE("a node declared dead that comes back serves nothing stale, workers sent to it "
          "are sent on to the job's new node",
          "[integration][failover]") {
  rack_cluster c{{"a", "b"}};
  auto b = c.nodes[1]->address();
  checkpointed_job job;
  start_checkpointed(c, job, "fenced", 2, 4);
  auto& ws = job.ws;
  auto& token = job.token;
  // n1 stops answering (its connections stay open): declared dead once its heartbeats
  // stop, and the job starts again on n0.
  c.nodes[1]->process().signal(SIGSTOP);
  job.release(); // on from step 20 at the latest, into the stopped node
  REQUIRE(
    c.coordinator.wait_for_log("job restarts: job='fenced'", std::chrono::seconds(20)));
  c.nodes[1]->process().signal(SIGCONT);
  for (auto& w : ws) {
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{2});
  }
  // Back, n1 registers again; the job it held there has ended (its workers left, or
  // the coordinator's answer fails it): its stale chunks serve nobody.
  CHECK(c.nodes[1]->wait_for_log("registering again", std::chrono::seconds(20)));
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    back = c.shell("print(#rw.nodes())").out == "2\n";
    if (!back)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  REQUIRE(back);
  // Workers that say hello at n1 are sent on to n0, where the job lives now.
  ws.clear();
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(b, "fenced", r, token));
  for (auto& w : ws) {
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{0});
    CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
  }
  CHECK(c.nodes[1]->wait_for_log("worker sent on: ", std::chrono::seconds(5)));
  auto where = c.shell("local j = rw.wait('fenced', 'finished', {timeout = 30}); "
                       "print(j.state, table.concat(j.nodes, ','))");
  CHECK(where.out == "finished\tn0\n");
}

} // namespace rw_integration_node_failover
