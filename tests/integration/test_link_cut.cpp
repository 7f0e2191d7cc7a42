// A cut link on 127.0.0.1 (rw.inject{kill = 'link'}: the node closes a worker's
// connections, as a failed link would): the worker says hello to that node again as the
// same rank, sends again what it had not had answered there, and the job goes on,
// bitwise at the single-process reference. No process restarts.

#include <cstdio>
#include <fstream>

#include <catch2/catch.hpp>

#include "tests/support/rack_cluster.hpp"

namespace rw_integration_link_cut {

using namespace rw;

namespace {

using testing::rack_cluster;
using run = testing::worker_process;
using testing::finish;

// With `held`, the worker waits after step 20 until that file exists, so a fault
// injected at clock 6 lands before the job ends however slow the machine.
std::unique_ptr<run> start(const std::string& connect, const std::string& job,
                           uint32_t rank, const std::string& token, bool split,
                           const std::string& held = {}) {
  std::vector<std::string> extra;
  if (!held.empty())
    extra = {"--pause-at", "20", "--resume-file", held};
  return testing::start_paced(connect, job, rank, token, "adam", 60, split, extra);
}

} // namespace

TEST_CASE("a cut link: the worker says hello again and the job goes on, bitwise",
          "[integration][failover]") {
  auto where = GENERATE(
    std::string("nodes = {'n0', 'n1'}, reduction = 'flat', replicas = 0"),
    std::string("nodes = {'n0', 'n1'}, reduction = 'flat', replicas = 1"),
    std::string("node = 'n0'"));
  INFO(where);
  rack_cluster c{{"a", "b"}};
  std::string err;
  auto token = c.create("cut", 2, "adam", where, &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto held = testing::temp_path("held");
  std::vector<std::unique_ptr<run>> ws;
  ws.push_back(start(c.nodes[0]->address(), "cut", 0, token, false, held));
  ws.push_back(start(c.nodes[0]->address(), "cut", 1, token, true, held));
  REQUIRE(c.wait_clock("cut", 6));
  auto cut = c.shell(
    "print(rw.inject{job = 'cut', kill = 'link', node = 'n0', rank = 1})");
  std::ofstream{held} << "go\n";
  INFO(cut.err);
  CHECK_THAT(cut.out, Catch::Contains("of rank 1 of job 'cut' on node n0"));
  CHECK_THAT(cut.out, !Catch::Contains("closed 0 connection(s)"));
  for (size_t r = 0; r < ws.size(); ++r) {
    auto [code, out] = finish(*ws[r]);
    INFO(out);
    CHECK(code == std::optional<int>{0});
    CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
    if (r == 1)
      CHECK_THAT(out, Catch::Contains("back on node n0 of job"));
  }
  CHECK(c.nodes[0]->wait_for_log("worker rejoined: job='cut'", std::chrono::seconds(5)));
  auto all = c.shell("print(rw.inject{job = 'cut', kill = 'link', node = 'n0'})");
  CHECK(all.code != 0); // the job has finished: nothing to cut
  std::remove(held.c_str());
}

TEST_CASE("rw.inject kill = 'link' refuses a rank the job does not have",
          "[integration][failover]") {
  rack_cluster c{{"a"}};
  std::string err;
  auto token = c.create("small", 2, "adam", "node = 'n0'", &err);
  REQUIRE(!token.empty());
  std::vector<std::unique_ptr<run>> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[0]->address(), "small", r, token, false));
  REQUIRE(c.wait_clock("small", 2));
  auto bad = c.shell("rw.inject{job = 'small', kill = 'link', rank = 7}");
  CHECK(bad.code != 0);
  CHECK_THAT(bad.err, Catch::Contains("has ranks 0..1, not 7"));
  for (auto& w : ws) {
    auto [code, out] = finish(*w);
    INFO(out);
    CHECK(code == std::optional<int>{0});
  }
}

} // namespace rw_integration_link_cut
