// Node failover by replicas on 127.0.0.1: a flat BSP job over three nodes keeps every
// chunk on its home and on its replica (replicas = 1, the default). A node is killed
// (kill -9) mid-training: the replicas of its chunks, which counted every push as their
// home did, take over; the workers keep their processes, re-route and re-send what was
// unanswered, and end bitwise at the single-process reference. One worker pushes and
// then pulls: its pushes are acked by the home before the step completes, and the
// replica has them too, so none is lost. The job then gets its replicas back on the
// two nodes left, and survives a second node's death the same way.

#include <csignal>
#include <cstdio>
#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/rack_cluster.hpp"

namespace rw_integration_node_takeover {

using namespace rw;

namespace {

using testing::rack_cluster;
using run = testing::worker_process;

std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, const std::string& token, bool split,
                           const std::string& optimizer, uint32_t steps = 30,
                           const std::string& resume_file = {}) {
  std::vector<std::string> held; // at step 20 until the file exists
  if (!resume_file.empty())
    held = {"--pause-at", "20", "--resume-file", resume_file};
  return testing::start_paced(connect, job, rank, token, optimizer, steps, split, held);
}

} // namespace

TEST_CASE(
  "nodes killed mid-training: their chunks' replicas take over, no worker restarts, "
  "bitwise",
  "[integration][failover]") {
  auto optimizer = GENERATE(std::string("adam"), std::string("lamb"));
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create("kept", 2, optimizer,
                        "racks = {'a', 'b', 'c'}, reduction = 'flat'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto before = c.shell("print(rw.job_status('kept').replicas)");
  CHECK(before.out == "1\n");
  auto resume = testing::temp_path("resume");
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(
    start(c.nodes[0]->address(), "kept", 0, token, false, optimizer, 50, resume));
  ws.push_back(
    start(c.nodes[1]->address(), "kept", 1, token, true, optimizer, 50, resume));
  REQUIRE(c.wait_clock("kept", 6));
  c.nodes[2]->process().signal(SIGKILL);
  // Taken over, then replicated again on n0 and n1 while it trains: a second loss is
  // survived too.
  REQUIRE(
    c.coordinator.wait_for_log("job has replicas again: kept", std::chrono::seconds(20)));
  auto mid = c.shell("local j = rw.job_status('kept'); print(j.state, #j.nodes, "
                     "j.ring_version, j.replicas)");
  INFO(mid.err);
  REQUIRE(mid.out == "running\t2\t3\t1\n");
  std::ofstream{resume} << "go\n"; // on from step 20, and n1 dies under way
  c.nodes[1]->process().signal(SIGKILL);
  testing::check_all_verified(ws, {"moved to nodes [n0,n1] (ring version 2)",
                                   "moved to nodes [n0] (ring version 4)"});
  auto status = c.shell(
    "local j = rw.job_status('kept'); print(#j.nodes, j.ring_version, "
    "j.replicas)");
  INFO(status.err);
  CHECK(status.out == "1\t4\t0\n");
  std::remove(resume.c_str());
}

TEST_CASE("replicas are refused where they cannot work, and counted once in job status",
          "[integration][failover]") {
  rack_cluster c{{"a", "b"}};
  std::string err;
  CHECK(c.create("one", 1, "sgd", "node = 'n0', replicas = 1", &err).empty());
  CHECK_THAT(err,
             Catch::Contains("replicas = 1 needs a flat BSP job on two nodes or more"));
  CHECK(c.create("ssp", 2, "sgd",
                 "racks = {'a', 'b'}, consistency = 'ssp:1', replicas = 1", &err)
          .empty());
  CHECK(c.create("bad", 2, "sgd", "racks = {'a', 'b'}, replicas = 2", &err).empty());
  CHECK_THAT(err, Catch::Contains("replicas must be 0 or 1"));
  auto solo = c.shell(
    "print(rw.job_create{name = 'solo', workers = 1, node = 'n0'}.replicas)");
  CHECK(solo.out == "0\n");
}

} // namespace rw_integration_node_takeover
