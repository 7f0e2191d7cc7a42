// One job across several rack-agg nodes and racks, on 127.0.0.1 (a coordinator and
// rack-agg nodes on their own ports, racks given by --rack). Flat mode: every worker
// sends each chunk to its home node on the job's consistent-hash ring, and results are
// bitwise the single-process reference summing in rank order. Hierarchical mode: each
// worker talks to its rack's agg, which sums its rack and takes part in the chunk's
// home's step; results are bitwise the reference summing each rack's ranks in rank
// order, then the racks in rack order. Chunks spread over the nodes as the ring says;
// auto picks from the link rates; bad placements are refused with clear errors; a node
// that dies mid-job fails the job, naming the node.

#include <csignal>
#include <memory>
#include <regex>
#include <tuple>

#include <catch2/catch.hpp>

#include "runtime/chunking.hpp"
#include "runtime/ring.hpp"
#include "tests/support/bench_json.hpp"
#include "tests/support/rack_cluster.hpp"
#include "tests/tools/fixture_job.hpp"

namespace rw_integration_racks {

using namespace rw;

namespace {

using testing::rack_cluster;
using testing::run_verified;
using testing::worker_process;
using workers_t = std::vector<std::unique_ptr<worker_process>>;

// Rank `rank` of the two of `job` (sum, verified), staying in the job after its steps
// until its node is killed; `rank_racks` for a hierarchical job.
std::unique_ptr<worker_process> held_worker(const std::string& connect,
                                            const std::string& job, uint32_t rank,
                                            const std::string& token,
                                            const std::string& rank_racks = {}) {
  auto a = testing::worker_args::of(connect, job, rank, token);
  a.hold_ms = 60'000;
  a.rank_racks = rank_racks;
  return testing::start_worker(a);
}

// Once job `job` is at clock 3, kills node n1: every worker must fail in bounded time
// and the job must end failed, naming the node.
void kill_mid_job(rack_cluster& c, workers_t& ws, const std::string& job) {
  auto running = c.shell("rw.wait('" + job
                         + "', 3, {timeout = 30}); print('at clock 3')");
  INFO(running.err);
  REQUIRE(running.out == "at clock 3\n");
  c.nodes[1]->process().signal(SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& w : ws) {
    auto code = w->proc->wait_until(deadline);
    INFO(testing::read_file(w->err_path));
    CHECK(code == std::optional<int>{2}); // failed, in bounded time
  }
  auto r = c.shell("local j = rw.wait('" + job
                   + "', 'ended', {timeout = 30}); "
                     "print(j.state, j.reason)");
  INFO(r.err);
  CHECK_THAT(r.out, Catch::StartsWith("failed"));
  CHECK_THAT(r.out, Catch::Contains("n1"));
}

// How many chunks of job `job` the node's log says are homed there.
int homed_here(const testing::node_process& node, const std::string& job) {
  std::regex line{"job started on this node: job='" + job + "'.*homed_here=([0-9]+)"};
  std::smatch m;
  auto log = node.log();
  return std::regex_search(log, m, line) ? std::stoi(m[1]) : -1;
}

} // namespace

TEST_CASE("a job over two racks' nodes, flat: exact for every optimizer (LAMB and LARS "
          "too), chunks where the ring says",
          "[integration][racks]") {
  rack_cluster c{{"a", "b"}};
  auto nodes = c.shell("for _, n in ipairs(rw.nodes()) do print(n.name, n.rack) end");
  CHECK(nodes.out == "n0\ta\nn1\tb\n");
  for (std::string opt : {"sum", "sgd", "momentum", "nesterov", "adam", "lamb", "lars"}) {
    auto job = "flat-" + opt;
    std::string err;
    auto token = c.create(job, 4, opt, "racks = {'a', 'b'}, reduction = 'flat'", &err);
    INFO(err);
    REQUIRE(!token.empty());
    // Workers name one address each: two in rack a's node, two in rack b's.
    auto a = c.nodes[0]->address();
    auto b = c.nodes[1]->address();
    run_verified({a, a, b, b}, job, opt, token);
  }
  // The ring's homes, as a worker or node computes them for the fixture's tensors.
  auto spec = testing::fixture_job("flat-sum", 4, optimizer_kind::sum);
  runtime::hash_ring ring{{"n0", "n1"}};
  std::vector<int> expect(2, 0);
  for (auto& t : spec.tensors) {
    runtime::chunk_layout layout{t.elements, spec.chunk_bytes};
    for (uint32_t ch = 0; ch < layout.count(); ++ch)
      ++expect[ring.owner(t.name, ch)];
  }
  CHECK(homed_here(*c.nodes[0], "flat-sum") == expect[0]);
  CHECK(homed_here(*c.nodes[1], "flat-sum") == expect[1]);
  auto status = c.shell(
    "local j = rw.job_status('flat-adam'); print(j.state, #j.nodes, "
    "j.nodes[1], j.nodes[2], j.racks[2], j.ring_version, j.reduction, "
    "j.ranks[1].clock, j.ranks[4].pushes)");
  INFO(status.err);
  // Every rank pushed each of the fixture's 10 chunks 3 times, each to its home.
  CHECK(status.out == "finished\t2\tn0\tn1\tb\t1\tflat\t3\t30\n");
}

TEST_CASE("a job over three nodes in three racks, flat, exact", "[integration][racks]") {
  rack_cluster c{{"r1", "r2", "r3"}};
  std::string err;
  auto token = c.create("three", 3, "momentum", "nodes = {'n2', 'n0', 'n1'}", &err);
  INFO(err);
  REQUIRE(!token.empty());
  run_verified({c.nodes[0]->address(), c.nodes[1]->address(), c.nodes[2]->address()},
               "three", "momentum", token);
  int total = 0;
  for (auto& n : c.nodes)
    total += homed_here(*n, "three");
  CHECK(total == 10); // every chunk has exactly one home
  // The ring is in rack order whatever order the nodes were named in.
  auto r = c.shell("local j = rw.job_status('three'); print(table.concat(j.nodes, ','))");
  CHECK(r.out == "n0,n1,n2\n");
}

TEST_CASE("bad placements are refused at create, naming what is wrong",
          "[integration][racks]") {
  rack_cluster c{{"a", "b"}};
  auto refused = [&](const std::string& where, const std::string& says,
                     const std::string& opt = "sum") {
    std::string err;
    auto token = c.create("bad", 4, opt, where, &err);
    INFO(where << " -> " << err);
    CHECK(token.empty());
    CHECK_THAT(err, Catch::Contains(says));
  };
  refused("racks = {'a', 'z'}", "rack 'z' has no live rack-agg node");
  refused("nodes = {'n0', 'nx'}", "no live node is named 'nx'");
  refused("nodes = {'n0', 'n0'}", "node 'n0' is named twice");
  refused("node = 'n0', racks = {'a'}", "give one of node, nodes and racks");
  refused("racks = {'a', 'b'}, reduction = 'tree'",
          "reduction must be auto, flat or hierarchical");
  refused("racks = {'a', 'b'}, reduction = 'hierarchical', consistency = 'ssp:1'",
          "it is BSP-only and the job asks for ssp:1");
  refused("node = 'n0', reduction = 'hierarchical'", "it needs two racks or more");
  refused("racks = {'a', 'b'}, reduction = 'hierarchical', worker_racks = {'a', 'b'}",
          "worker_racks names 2 racks for 4 workers");
  refused(
    "racks = {'a', 'b'}, reduction = 'hierarchical', worker_racks = {'a', 'a', 'z', 'b'}",
    "rank 2's rack 'z' has no node in the job");
  refused(
    "racks = {'a', 'b'}, reduction = 'hierarchical', worker_racks = {'a', 'a', 'a', 'a'}",
    "rack 'b' is in the job but none of its workers is");
  refused("racks = {'a', 'b'}, reduction = 'flat', worker_racks = {'a', 'a', 'b', 'b'}",
          "a flat job's workers talk to every node");
  // SSP and async run across nodes in flat mode.
  std::string err;
  CHECK(!c.create("ssp-flat", 2, "sum", "racks = {'a', 'b'}, consistency = 'ssp:1'", &err)
           .empty());
  INFO(err);
}

TEST_CASE("a node that dies mid-job fails the job, naming the node, and nobody hangs",
          "[integration][racks]") {
  rack_cluster c{{"a", "b"}};
  std::string err;
  // Without replicas (with them, test_node_takeover.cpp: the job goes on).
  auto token = c.create("doomed", 2, "sum", "racks = {'a', 'b'}, replicas = 0", &err);
  INFO(err);
  REQUIRE(!token.empty());
  workers_t ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(held_worker(c.nodes[0]->address(), "doomed", r, token));
  kill_mid_job(c, ws, "doomed");
}

TEST_CASE("rw-bench creates its job through the coordinator, over two racks' nodes",
          "[integration][racks]") {
  // The first rack-agg embeds the coordinator; the second joins it (the README's
  // two-machine quick start, on one host), neither with open jobs.
  testing::node_process a{{"--name", "na", "--rack", "a"}, {"rack-agg", false, {}}};
  testing::node_process b{{"--name", "nb", "--rack", "b"},
                          {"rack-agg", false, a.address()}};
  REQUIRE(a.wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{RW_BENCH_PATH, "comm", "--connect", a.address(),
                                  "--workers",   "4",    "--bytes",   "1MiB",
                                  "--iters",     "3",    "--verify",  "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto err = testing::temp_path("bench.err");
    tools::subprocess p{argv, true, err};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto out = p.read_all(deadline);
    auto code = p.wait_until(deadline);
    auto text = testing::read_file(err);
    std::remove(err.c_str());
    return std::make_tuple(code, out, text);
  };
  auto [code, out, err] = run({"--worker-racks", "a,a,b,b", "--reduction", "flat"});
  INFO(out << err);
  CHECK(code == std::optional<int>{0});
  auto flat = testing::bench_json(out);
  CHECK(flat["verified"] == true);
  CHECK(flat["reduction"] == "flat");
  CHECK(flat["nodes"] == 2);
  // The job was deleted after the run; both nodes served it.
  CHECK(testing::run_shell({"--connect", a.address(), "-c", "print(#rw.jobs())"}).out
        == "0\n");
  CHECK(a.wait_for_log("homed_here="));
  CHECK(b.wait_for_log("homed_here="));
  // Hierarchical, with a barrier before each step (the netns benchmarks' workers): the
  // barrier's own tensor does not disturb the verified gradient.
  auto [code4, out4, err4] = run(
    {"--worker-racks", "a,b,a,b", "--reduction", "hierarchical", "--barrier"});
  INFO(out4 << err4);
  CHECK(code4 == std::optional<int>{0});
  auto hier = testing::bench_json(out4);
  CHECK(hier["verified"] == true);
  CHECK(hier["reduction"] == "hierarchical");
  CHECK(hier["nodes"] == 2);
  // Without racks the job goes to the node named by --connect.
  auto [code1, out1, err1] = run({});
  INFO(out1 << err1);
  CHECK(code1 == std::optional<int>{0});
  CHECK(testing::bench_json(out1)["nodes"] == 1);
  // A rack with no node, and a rack list of the wrong length, are clear errors.
  auto [code2, out2, err2] = run({"--worker-racks", "a,a,c,c"});
  CHECK(code2 == std::optional<int>{2});
  CHECK_THAT(err2, Catch::Contains("rack 'c' has no live rack-agg node"));
  auto [code3, out3, err3] = run({"--worker-racks", "a,b"});
  CHECK(code3 == std::optional<int>{2});
  CHECK_THAT(err3, Catch::Contains("names 2 racks for 4 workers"));
}

TEST_CASE("a hierarchical job over two racks: exact in rack order for every optimizer "
          "(LAMB and LARS too)",
          "[integration][racks]") {
  rack_cluster c{{"a", "b"}};
  auto a = c.nodes[0]->address();
  auto b = c.nodes[1]->address();
  // Over TCP and over shared memory (each worker shares this host with its rack's agg;
  // --transport shm fails unless the node takes the worker's segment).
  for (std::string transport : {"tcp", "shm"})
    for (std::string opt :
         {"sum", "sgd", "momentum", "nesterov", "adam", "lamb", "lars"}) {
      auto job = "hier-" + opt + (transport == "tcp" ? "" : "-shm");
      std::string err;
      auto token = c.create(job, 4, opt, "racks = {'a', 'b'}, reduction = 'hierarchical'",
                            &err);
      INFO(transport << ": " << err);
      REQUIRE(!token.empty());
      // Ranks 0, 1 in rack a, 2, 3 in rack b: each says hello to its own rack's agg.
      run_verified({a, a, b, b}, job, opt, token, "0,0,1,1", {}, transport);
    }
  // Interleaved racks: the sum order follows the racks, not the ranks.
  std::string err;
  auto token = c.create("hier-mixed", 4, "momentum",
                        "racks = {'a', 'b'}, reduction = 'hierarchical', "
                        "worker_racks = {'b', 'a', 'b', 'a'}",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  run_verified({b, a, b, a}, "hier-mixed", "momentum", token, "1,0,1,0");
  auto status = c.shell(
    "local j = rw.job_status('hier-adam'); print(j.state, j.reduction, "
    "#j.nodes, j.ranks[1].clock, j.ranks[4].pushes)");
  INFO(status.err);
  CHECK(status.out == "finished\thierarchical\t2\t3\t30\n");
  // With worker_racks fixing each rank's rack, workers that all name rack a's agg are
  // sent on to their own rack's agg.
  auto moved = c.create("hier-moved", 4, "nesterov",
                        "racks = {'a', 'b'}, reduction = 'hierarchical', "
                        "worker_racks = {'a', 'a', 'b', 'b'}");
  REQUIRE(!moved.empty());
  run_verified({a, a, a, a}, "hier-moved", "nesterov", moved, "0,0,1,1");
  CHECK(
    c.nodes[0]->wait_for_log("job='hier-moved' rank=3: to its rack's agg n1 at " + b));
}

TEST_CASE("a hierarchical job over three racks, exact", "[integration][racks]") {
  rack_cluster c{{"r1", "r2", "r3"}};
  std::string err;
  auto token = c.create("hier3", 3, "adam",
                        "racks = {'r1', 'r2', 'r3'}, reduction = 'hierarchical'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  run_verified({c.nodes[0]->address(), c.nodes[1]->address(), c.nodes[2]->address()},
               "hier3", "adam", token, "0,1,2");
}

TEST_CASE("auto picks hierarchical behind an oversubscribed core, flat otherwise",
          "[integration][racks]") {
  testing::node_process coord{{"--name", "coord"}, {"coordinator", false, {}}};
  auto member = [&](const std::string& name, const std::string& rack,
                    const std::string& core) {
    return std::make_unique<testing::node_process>(
      std::vector<std::string>{"--name", name, "--rack", rack, "--uplink-gbps", "2",
                               "--core-gbps", core},
      testing::node_role{"rack-agg", false, coord.address()});
  };
  auto a = member("n0", "a", "0.5"); // 4:1 below the rack's 2 Gbit/s
  auto b = member("n1", "b", "0.5");
  auto a2 = member("n2", "a2", "2"); // no oversubscription
  auto b2 = member("n3", "b2", "2");
  REQUIRE(coord.wait_for_log("4 node(s) live", std::chrono::seconds(15)));
  auto plan = [&](const std::string& name, const std::string& racks) {
    auto r = testing::run_shell({"--connect", coord.address(), "-c",
                                 "local j = rw.job_create{name = '" + name
                                   + "', workers = 4, racks = {" + racks
                                   + "}}; print(j.reduction); print(j.plan)"});
    INFO(r.err);
    return r.out;
  };
  auto oversubscribed = plan("j1", "'a', 'b'");
  CHECK_THAT(oversubscribed, Catch::StartsWith("hierarchical\nauto: hierarchical"));
  CHECK_THAT(oversubscribed, Catch::Contains("core links 0.5 Gbit/s"));
  CHECK_THAT(plan("j2", "'a2', 'b2'"), Catch::StartsWith("flat\nauto: flat"));
  CHECK_THAT(plan("j3", "'a'"), Catch::StartsWith("flat\nauto: one node"));
  CHECK(coord.wait_for_log("job placed: job='j1'"));
}

TEST_CASE("a hierarchical job whose node dies mid-job fails, naming it, and nobody hangs",
          "[integration][racks]") {
  rack_cluster c{{"a", "b"}};
  std::string err;
  auto token = c.create("hier-doomed", 2, "sum",
                        "racks = {'a', 'b'}, reduction = 'hierarchical'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  workers_t ws;
  ws.push_back(held_worker(c.nodes[0]->address(), "hier-doomed", 0, token, "0,1"));
  ws.push_back(held_worker(c.nodes[1]->address(), "hier-doomed", 1, token, "0,1"));
  kill_mid_job(c, ws, "hier-doomed");
}

} // namespace rw_integration_racks
