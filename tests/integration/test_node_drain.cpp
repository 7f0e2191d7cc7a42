// Rebalancing by drain on 127.0.0.1: a flat BSP job over three nodes trains while
// rw.node_drain takes one node out. Its chunks move, with their state, to their homes
// on the ring of the two nodes left; the workers keep their processes, re-route and
// re-send what was unanswered, and end bitwise at the single-process reference. One
// worker pushes and then pulls (its pushes are acked before the step completes), so a
// push counted on a chunk that settles is never lost. The drained node takes no new
// jobs; a job on it alone stays, and the drain says why.

#include <csignal>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/rack_cluster.hpp"

namespace rw_integration_node_drain {

using namespace rw;

namespace {

using testing::rack_cluster;
using run = testing::worker_process;

// `steps` paced steps. The drain from the shell needs about 80 (3 s), so it lands while
// the workers push: with 30, a loaded machine once ended the job before the drain's
// shell had started ("moved 0 job(s)"). Unlike the join tests no rank holds at a clock
// boundary: a drain that lands mid-step is what this covers.
std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, const std::string& token, bool split,
                           const std::string& optimizer, uint32_t steps) {
  return testing::start_paced(connect, job, rank, token, optimizer, steps, split);
}

} // namespace

TEST_CASE("a node drained mid-training: its chunks move with their state, bitwise",
          "[integration][failover]") {
  auto optimizer = GENERATE(std::string("adam"), std::string("lamb"));
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create("moving", 2, optimizer,
                        "racks = {'a', 'b', 'c'}, reduction = 'flat'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto solo = c.create("alone", 1, "sgd", "node = 'n2'", &err);
  REQUIRE(!solo.empty());
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(start(c.nodes[0]->address(), "moving", 0, token, false, optimizer, 80));
  ws.push_back(start(c.nodes[1]->address(), "moving", 1, token, true, optimizer, 80));
  REQUIRE(c.wait_clock("moving", 6));
  auto drain = c.shell("print(rw.node_drain('n2'))");
  INFO(drain.err);
  CHECK_THAT(drain.out, Catch::Contains("moved 1 job(s): moving: moved to [n0,n1]"));
  CHECK_THAT(drain.out, Catch::Contains("alone: no worker has joined it yet"));
  testing::check_all_verified(ws, {"moved to nodes [n0,n1] (ring version 2)"});
  auto status = c.shell("local j = rw.job_status('moving'); print(j.state, #j.nodes, "
                        "j.ring_version)");
  INFO(status.err);
  CHECK_THAT(status.out,
             Catch::StartsWith("finished\t2\t2") || Catch::StartsWith("running\t2\t2"));
  CHECK(
    c.nodes[2]->wait_for_log("job moved away: job='moving'", std::chrono::seconds(5)));
  CHECK(c.coordinator.wait_for_log("job moved: job='moving'", std::chrono::seconds(5)));
  auto refused = c.shell("rw.job_create{name = 'late', workers = 1, node = 'n2'}");
  CHECK(refused.code != 0);
  CHECK_THAT(refused.err, Catch::Contains("node 'n2' was drained"));
}

TEST_CASE("draining an unknown node is a clear error", "[integration][failover]") {
  rack_cluster c{{"a"}};
  auto r = c.shell("rw.node_drain('nowhere')");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("no live node is named 'nowhere'"));
  CHECK_THAT(r.err, Catch::Contains("n0"));
}

TEST_CASE("SIGTERM on a node that holds chunks drains it before it stops",
          "[integration][failover]") {
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create("leaving", 2, "adam",
                        "racks = {'a', 'b', 'c'}, reduction = 'flat'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  // The workers hold after 6 steps until the node has stopped: unheld, they once ran
  // their 30 steps out before the SIGTERM landed ("moved 0 job(s)").
  auto resume = testing::temp_path("drain-resume");
  std::vector<std::string> hold{"--pause-at", "6", "--resume-file", resume};
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(testing::start_paced(c.nodes[0]->address(), "leaving", 0, token, "adam",
                                    30, false, hold));
  ws.push_back(testing::start_paced(c.nodes[1]->address(), "leaving", 1, token, "adam",
                                    30, true, hold));
  REQUIRE(c.wait_clock("leaving", 6));
  c.nodes[2]->process().signal(SIGTERM);
  auto code = c.nodes[2]->process().wait_until(std::chrono::steady_clock::now()
                                               + std::chrono::seconds(60));
  { std::ofstream{resume}; } // the workers go on, on n0 and n1
  CHECK(code == std::optional<int>{0});
  INFO(c.nodes[2]->log());
  CHECK_THAT(c.nodes[2]->log(), Catch::Contains("node n2 drained in"));
  CHECK_THAT(c.nodes[2]->log(),
             Catch::Contains("moved 1 job(s): leaving: moved to [n0,n1]"));
  testing::check_all_verified(ws);
  std::remove(resume.c_str());
}

} // namespace rw_integration_node_drain
