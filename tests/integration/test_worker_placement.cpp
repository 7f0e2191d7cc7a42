// A worker is placed at its nearest rack-agg (a hierarchical job created without
// worker_racks): by its host, its rack option, the node it named, or the round trip it
// measures; its rank is bound to that rack at the coordinator, and the job's rack parts
// start once every rank is bound. On 127.0.0.1 every node shares the workers' host, so
// among them the rack option decides, else the node named, else the round trip (the
// single-host-node rule is tested in tests/unit/test_rack_choice.cpp). Results are
// bitwise the reference summing each rack's ranks in rank order, then the racks.

#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/bench_json.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_worker_placement {

using namespace rw;
using testing::rack_cluster;
using testing::run_verified;
using testing::worker_process;

namespace {

const std::string hierarchical = "racks = {'a', 'b'}, reduction = 'hierarchical'";

// Rank `rank` of the `workers` of `job` (sum, verified) at `connect`, with the rack
// option `rack` ("": none); `rank_racks` for the reference of a hierarchical job.
std::unique_ptr<worker_process> start_worker(const std::string& connect,
                                             const std::string& job, uint32_t rank,
                                             uint32_t workers, const std::string& token,
                                             const std::string& rack = {},
                                             const std::string& rank_racks = {}) {
  auto a = testing::worker_args::of(connect, job, rank, token);
  a.workers = workers;
  a.rack = rack;
  a.rank_racks = rank_racks;
  return testing::start_worker(a);
}

// Waits for the worker to end: its exit code (nothing if it did not in time) and what
// it printed.
std::pair<std::optional<int>, std::string> finish(std::unique_ptr<worker_process>& w,
                                                  std::chrono::seconds limit) {
  return testing::finish(*w, std::chrono::steady_clock::now() + limit);
}

// The text after `marker` in the file, up to the next ": ", once it shows up.
std::string wait_for_word(const std::string& path, const std::string& marker) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto text = testing::read_file(path);
    auto at = text.find(marker);
    if (at != std::string::npos) {
      auto from = at + marker.size();
      auto end = text.find(": ", from);
      if (end != std::string::npos)
        return text.substr(from, end - from);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

} // namespace

TEST_CASE("workers with rack options, all saying hello to one node, end at their racks' "
          "aggs: exact in rack order",
          "[integration][nearest]") {
  rack_cluster c{{"a", "b"}};
  auto a = c.nodes[0]->address();
  auto b = c.nodes[1]->address();
  std::string err;
  auto token = c.create("opts", 4, "momentum", hierarchical, &err);
  INFO(err);
  REQUIRE(!token.empty());
  // Interleaved: ranks 0, 2 in rack a, 1, 3 in rack b, whatever node they named.
  run_verified({a, a, a, a}, "opts", "momentum", token, "0,1,0,1", {"a", "b", "a", "b"});
  CHECK(
    c.nodes[0]->wait_for_log("job='opts' rank=1: to its rack's agg n1 at " + b
                             + " (rack b): same host (127.0.0.1) as n0, n1; among them "
                               "the worker's rack option 'b'"));
  CHECK(c.coordinator.wait_for_log("rank bound: job='opts'"));
  CHECK(c.coordinator.wait_for_log("job placed at join: job='opts'"));
  auto status = c.shell("local j = rw.job_status('opts'); print(j.state, "
                        "table.concat(j.rank_racks, ','))");
  INFO(status.err);
  CHECK(status.out == "finished\ta,b,a,b\n");
  // rw-bench gives each worker its rack option the same way.
  auto bench_err = testing::temp_path("bench.err");
  tools::subprocess bench{{RW_BENCH_PATH, "comm", "--connect", a, "--workers", "4",
                           "--bytes", "256KiB", "--iters", "2", "--verify", "--json",
                           "--rack", "b,a,b,a", "--reduction", "hierarchical"},
                          true,
                          bench_err};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto out = bench.read_all(deadline);
  auto code = bench.wait_until(deadline);
  INFO(out << testing::read_file(bench_err));
  std::remove(bench_err.c_str());
  CHECK(code == std::optional<int>{0});
  auto j = testing::bench_json(out);
  CHECK(j["verified"] == true);
  CHECK(j["reduction"] == "hierarchical");
  CHECK(j["nodes"] == 2);
}

TEST_CASE("without rack options a worker is placed in the rack of the node it named",
          "[integration][nearest]") {
  rack_cluster c{{"a", "b"}};
  auto a = c.nodes[0]->address();
  auto b = c.nodes[1]->address();
  auto token = c.create("named", 4, "adam", hierarchical);
  REQUIRE(!token.empty());
  run_verified({b, a, b, a}, "named", "adam", token, "1,0,1,0");
  // Both nodes share the workers' host: the node named decides among them.
  CHECK(
    c.nodes[1]->wait_for_log("job='named' rank=0 rack=b node=n1: same host (127.0.0.1) "
                             "as n0, n1; among them the rack of the node it named (n1)"));
  CHECK(c.nodes[0]->wait_for_log("job='named' rank=1 rack=a node=n0"));
  auto status = c.shell("print(table.concat(rw.job_status('named').rank_racks, ','))");
  CHECK(status.out == "b,a,b,a\n");
}

TEST_CASE("bad rack options, ranks that never join and ranks claimed by two racks are "
          "clear errors, in bounded time",
          "[integration][nearest]") {
  rack_cluster c{{"a", "b"}};
  auto a = c.nodes[0]->address();
  auto b = c.nodes[1]->address();
  auto token = c.create("badrack", 2, "sum", hierarchical);
  REQUIRE(!token.empty());
  auto w = start_worker(a, "badrack", 0, 2, token, "z");
  auto [code, err] = finish(w, std::chrono::seconds(30));
  INFO(err);
  CHECK(code == std::optional<int>{2});
  CHECK_THAT(err, Catch::Contains("the worker's rack 'z' is not a rack of job 'badrack' "
                                  "(its racks: a, b)"));
  // With worker_racks, a rack option that contradicts the rank's rack names both.
  auto fixed = c.create("fixed", 2, "sum", hierarchical + ", worker_racks = {'a', 'b'}");
  REQUIRE(!fixed.empty());
  auto wf = start_worker(a, "fixed", 0, 2, fixed, "b");
  auto [fcode, ferr] = finish(wf, std::chrono::seconds(30));
  INFO(ferr);
  CHECK(fcode == std::optional<int>{2});
  CHECK_THAT(ferr, Catch::Contains("rank 0 of job 'fixed' belongs to rack a (the job's "
                                   "worker_racks), but the worker says its rack is 'b'"));
  // Rank 2 never says hello: the others are not admitted, and fail once the join
  // timeout has passed, naming it.
  auto missing = c.create("missing", 3, "sum", hierarchical + ", join_timeout_ms = 2000");
  REQUIRE(!missing.empty());
  auto started = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<worker_process>> ws;
  ws.push_back(start_worker(a, "missing", 0, 3, missing));
  ws.push_back(start_worker(b, "missing", 1, 3, missing));
  for (auto& m : ws) {
    auto [mcode, merr] = finish(m, std::chrono::seconds(30));
    INFO(merr);
    CHECK(mcode == std::optional<int>{2});
    CHECK_THAT(merr,
               Catch::Contains("rank(s) 2 of job 'missing' did not join within 2000 ms"));
  }
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(25));
  auto status = c.shell("local j = rw.job_status('missing'); print(j.state, j.reason)");
  CHECK_THAT(status.out, Catch::StartsWith("failed"));
  CHECK_THAT(status.out, Catch::Contains("rank(s) 2"));
  // A rank bound to rack a cannot be bound to rack b: the second claim is refused at
  // once, naming both racks (the first waits for rank 1, which never comes).
  auto twice = c.create("twice", 2, "sum", hierarchical + ", join_timeout_ms = 2000");
  REQUIRE(!twice.empty());
  auto first = start_worker(a, "twice", 0, 2, twice, "a");
  REQUIRE(
    c.coordinator.wait_for_log("rank bound: job='twice'", std::chrono::seconds(20)));
  auto second = start_worker(b, "twice", 0, 2, twice, "b");
  auto [scode, serr] = finish(second, std::chrono::seconds(30));
  INFO(serr);
  CHECK(scode == std::optional<int>{2});
  CHECK_THAT(serr, Catch::Contains("rank 0 of job 'twice' is in rack a"));
  CHECK_THAT(serr, Catch::Contains("node n1 would place it in rack b"));
  auto [fcode2, ferr2] = finish(first, std::chrono::seconds(30));
  INFO(ferr2);
  CHECK(fcode2 == std::optional<int>{2});
  CHECK_THAT(ferr2, Catch::Contains("rank(s) 1 of job 'twice' did not join"));
}

TEST_CASE("a worker that names a node with no rack in the job is sent on: to its rack's "
          "agg, or to the nearest by round trip",
          "[integration][nearest]") {
  rack_cluster c{{"a", "b", "c"}};
  auto token = c.create("rtt", 2, "sum", hierarchical);
  REQUIRE(!token.empty());
  std::vector<std::string> aggs{c.nodes[0]->address(), c.nodes[1]->address()};
  // Rank 0 says hello to the coordinator, with no rack option: it measures the aggs.
  auto w0 = start_worker(c.coordinator.address(), "rtt", 0, 2, token, {}, "0,1");
  auto chosen = wait_for_word(w0->err_path, "rank 0 of job 'rtt' says hello at ");
  INFO(testing::read_file(w0->err_path) << c.coordinator.log());
  REQUIRE((chosen == aggs[0] || chosen == aggs[1]));
  auto k = chosen == aggs[0] ? 0 : 1;
  // Rank 1 says hello to n2 (not in the job) with the other rack as its option: sent on
  // there. One rank per rack sums the same either way (a + b == b + a).
  auto w1 = start_worker(c.nodes[2]->address(), "rtt", 1, 2, token, k == 0 ? "b" : "a",
                         "0,1");
  auto [code0, err0] = finish(w0, std::chrono::seconds(60));
  auto [code1, err1] = finish(w1, std::chrono::seconds(60));
  INFO(err0 << err1);
  CHECK(code0 == std::optional<int>{0});
  CHECK(code1 == std::optional<int>{0});
  CHECK_THAT(err0, Catch::Contains("says hello at " + chosen + ": lowest round trip"));
  CHECK(c.coordinator.wait_for_log("job='rtt' rank=0: node coord is the coordinator; to "
                                   + aggs[0] + ", " + aggs[1]));
  CHECK(c.nodes[k]->wait_for_log("which the worker picked by lowest round trip"));
  CHECK(c.nodes[2]->wait_for_log("job='rtt' rank=1: node n2 does not hold the job; to "
                                 + aggs[1 - k]));
  auto status = c.shell("print(table.concat(rw.job_status('rtt').rank_racks, ','))");
  CHECK(status.out == (k == 0 ? "a,b\n" : "b,a\n"));
}

} // namespace rw_integration_worker_placement
