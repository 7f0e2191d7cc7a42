// Rebalancing by join on 127.0.0.1: a flat BSP job trains on two nodes while
// rw.node_join brings a third into it. The chunks the ring with the new node homes
// there (and their replicas) move, with their state; the workers keep their processes,
// say hello to the new node when the reroute names it, re-send what was unanswered, and
// end bitwise at the single-process reference. A node drained and joined again takes
// the job back (its old copy of the job answers for nothing).

#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <signal.h>

#include "protocol/frame.hpp"
#include "runtime/ring.hpp"
#include "tests/support/rack_cluster.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_node_join {

using namespace rw;

namespace {

using testing::rack_cluster;
using run = testing::worker_process;
using testing::finish;

// Every rank holds before step `hold` until `resume` exists, so a drain or join lands
// while the job runs: on a loaded machine the job once ended first ("moved 0 job(s)").
// A move settles the job at a clock boundary, which a hold of every rank is.
std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, const std::string& token, bool split,
                           uint32_t steps, uint32_t hold, const std::string& resume) {
  return testing::start_paced(connect, job, rank, token, "adam", steps, split,
                              {"--pause-at", std::to_string(hold), "--resume-file",
                               resume, "--pause-limit-ms", "120000"});
}

} // namespace

TEST_CASE("a node joins a running job: chunks move onto it with their state, bitwise",
          "[integration][failover]") {
  auto replicas = GENERATE(0, 1);
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create(
    "growing", 2, "adam",
    fmt::format("nodes = {{'n0', 'n1'}}, reduction = 'flat', replicas = {}", replicas),
    &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(start(c.nodes[0]->address(), "growing", 0, token, false, 60, 30, resume));
  ws.push_back(start(c.nodes[1]->address(), "growing", 1, token, true, 60, 30, resume));
  REQUIRE(c.wait_clock("growing", 6));
  auto join = c.shell("print(rw.node_join('n2'))");
  std::ofstream{resume} << "go\n";
  INFO(join.err);
  CHECK_THAT(join.out, Catch::Contains("node n2 joined in"));
  CHECK_THAT(join.out,
             Catch::Contains("moved 1 job(s) onto it: growing: moved to [n0,n1,n2]"));
  testing::check_all_verified(
    ws, {"joined node n2 of job", "moved to nodes [n0,n1,n2] (ring version 2)"});
  std::remove(resume.c_str());
  CHECK(c.nodes[2]->wait_for_log("job joining: job='growing'", std::chrono::seconds(5)));
  CHECK(
    c.nodes[2]->wait_for_log("worker joined: job='growing'", std::chrono::seconds(5)));
  auto status = c.shell("local j = rw.job_status('growing'); print(j.state, #j.nodes, "
                        "j.ring_version)");
  INFO(status.err);
  CHECK_THAT(status.out,
             Catch::StartsWith("finished\t3\t2") || Catch::StartsWith("running\t3\t2"));
}

TEST_CASE("a drained node joined again takes the job back, bitwise",
          "[integration][failover]") {
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create("tide", 2, "adam", "racks = {'a', 'b', 'c'}, reduction = 'flat'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(start(c.nodes[0]->address(), "tide", 0, token, false, 60, 30, resume));
  ws.push_back(start(c.nodes[1]->address(), "tide", 1, token, true, 60, 30, resume));
  REQUIRE(c.wait_clock("tide", 5));
  auto drain = c.shell("print(rw.node_drain('n2'))");
  INFO(drain.err);
  CHECK_THAT(drain.out, Catch::Contains("tide: moved to [n0,n1]"));
  auto refused = c.shell("rw.job_create{name = 'late', workers = 1, node = 'n2'}");
  CHECK_THAT(refused.err, Catch::Contains("node 'n2' was drained"));
  auto join = c.shell("print(rw.node_join('n2'))");
  std::ofstream{resume} << "go\n";
  INFO(join.err);
  CHECK_THAT(join.out, Catch::Contains("it takes new jobs again"));
  CHECK_THAT(join.out, Catch::Contains("tide: moved to [n0,n1,n2]"));
  testing::check_all_verified(ws, {"(ring version 3)", "joined node n2 of job"}, 90);
  std::remove(resume.c_str());
  auto status = c.shell(
    "local j = rw.job_status('tide'); print(#j.nodes, j.ring_version)");
  CHECK_THAT(status.out, Catch::StartsWith("3\t3"));
  auto placed = c.shell(
    "print(rw.job_create{name = 'later', workers = 1, node = 'n2'}.node)");
  INFO(placed.err);
  CHECK(placed.out == "n2\n");
}

TEST_CASE("joining an unknown node is a clear error, a job on one node stays",
          "[integration][failover]") {
  rack_cluster c{{"a", "b"}};
  auto r = c.shell("rw.node_join('nowhere')");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("rw.node_join: no live node is named 'nowhere'"));
  std::string err;
  auto token = c.create("single", 2, "adam", "node = 'n0'", &err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  std::vector<std::unique_ptr<run>> ws;
  for (uint32_t rank = 0; rank < 2; ++rank)
    ws.push_back(
      start(c.nodes[0]->address(), "single", rank, token, false, 20, 10, resume));
  REQUIRE(c.wait_clock("single", 2));
  auto join = c.shell("print(rw.node_join('n1'))");
  std::ofstream{resume} << "go\n";
  INFO(join.err);
  CHECK_THAT(join.out, Catch::Contains("moved 0 job(s) onto it"));
  CHECK_THAT(join.out, Catch::Contains("single: it lives on one node alone"));
  for (auto& w : ws) {
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{0});
  }
  std::remove(resume.c_str());
}

// Issue 59, finding 3: a push whose header the node checked while its chunk was homed
// there, and whose payload came in after rw.node_join moved the chunk to the new node:
// the node looked the chunk's shard up again, got "not here" and wrote past its outbox
// (a segfault). It drops the frame now (the worker sends it again to the new home).
TEST_CASE("a push whose chunk moves to a joining node while its payload arrives is "
          "dropped, and the node serves on",
          "[integration][failover][bad]") {
  rack_cluster c{{"a", "b", "c"}}; // nodes log at debug (node_process)
  std::string err;
  auto token = c.create("moving", 1, "sgd",
                        "nodes = {'n0', 'n1'}, reduction = 'flat', replicas = 0", &err);
  INFO(err);
  REQUIRE(!token.empty());
  // A chunk homed on n0 that the ring with n2 homes there (no replicas: n0 keeps none).
  const uint64_t elements = 64 * 1024; // 64 chunks of 4 KiB
  const runtime::hash_ring before{{"n0", "n1"}}, after{{"n0", "n1", "n2"}};
  uint32_t chunk = 64;
  for (uint32_t k = 0; k < 64 && chunk == 64; ++k)
    if (before.owner("w", k) == 0 && after.owner("w", k) == 2)
      chunk = k;
  REQUIRE(chunk < 64);

  testing::raw_client w{c.nodes[0]->address()};
  job_spec spec;
  spec.name = "moving";
  spec.tensors = {{"w", elements, false}};
  auto welcome = w.join_welcome(spec, 0, token, true);
  testing::raw_client w1{c.nodes[1]->address()}; // a flat job's worker joins each node
  w1.join_welcome(spec, 0, token, true);
  // The push's header and a quarter of its payload; the rest after the move.
  protocol::frame_header h;
  h.kind = protocol::frame_kind::push;
  h.job_id = welcome.job_id;
  h.chunk_index = chunk;
  h.payload_bytes = 4096;
  std::vector<std::byte> frame(protocol::frame_header_bytes + h.payload_bytes);
  protocol::encode(h, frame.data());
  w.send_bytes(frame.data(), protocol::frame_header_bytes + 1024);
  std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the header is read

  auto join = c.shell("print(rw.node_join('n2'))");
  INFO(join.err);
  REQUIRE_THAT(join.out,
               Catch::Contains("moved 1 job(s) onto it: moving: moved to [n0,n1,n2]"));
  w.send_bytes(frame.data() + protocol::frame_header_bytes + 1024,
               h.payload_bytes - 1024);
  CHECK(c.nodes[0]->wait_for_log("its chunk moved to another node while the frame "
                                 "arrived",
                                 std::chrono::seconds(10)));
  CHECK(kill(c.nodes[0]->pid(), 0) == 0); // alive; its destructor checks how it ends
  auto status = c.shell("local j = rw.job_status('moving'); print(#j.nodes)");
  INFO(status.err);
  CHECK(status.out == "3\n");
}

} // namespace rw_integration_node_join
