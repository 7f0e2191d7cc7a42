// Stragglers and hangs named (issue 60, item 4): a rank that comes late each step is
// the slowest rank in rw.job_status and in /metrics within a few steps, and a rank
// that stops (SIGSTOP) is named, with its missing chunks, in the node's log and in
// job status within 2 s of --slow-step-ms.

#include <signal.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/http_probe.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/rack_cluster.hpp"
#include "tests/support/test_worker.hpp"

namespace rw_integration_stragglers {

using namespace rw;
using namespace std::chrono_literals;

namespace {

// A port nobody listens on now (bound, then let go).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// GET /metrics: its body, "" while nothing answers.
std::string get_metrics(int port) {
  try {
    return test::http_get(port, "/metrics").body;
  } catch (const std::runtime_error&) { // not listening yet
    return {};
  }
}

// The job's rw_job_rank_late_seconds samples: rank -> seconds.
std::map<int, double> late_samples(const std::string& text, const std::string& job) {
  std::map<int, double> out;
  std::regex line(
    R"re(rw_job_rank_late_seconds\{rw_job="([^"]*)",rank="(\d+)"\} ([0-9.eE+-]+))re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
       it != std::sregex_iterator(); ++it)
    if ((*it)[1] == job)
      out[std::stoi((*it)[2])] = std::stod((*it)[3]);
  return out;
}

struct fixture {
  explicit fixture(std::vector<std::string> extra)
    : node{std::move(extra), {"rack-agg", false, {}}} {}

  testing::shell_run shell(const std::string& code) {
    return testing::run_shell({"--connect", node.address(), "-c", code});
  }

  // Creates the fixture job `name` for `workers` ranks; its token.
  std::string create(const std::string& name, uint32_t workers) {
    auto made = shell(fmt::format(
      "local j = rw.job_create{{name = '{}', workers = {}, optimizer = 'sum', "
      "lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB'}}; "
      "print(j.token)",
      name, workers));
    INFO(made.err);
    REQUIRE(made.code == 0);
    return made.out.substr(0, made.out.find('\n'));
  }

  testing::node_process node;
};

} // namespace

TEST_CASE("a rank 30 ms late each step is the slowest rank in job status and /metrics "
          "within 5 steps",
          "[integration][cluster][status]") {
  auto port = free_port();
  fixture f{{"--metrics", fmt::format("127.0.0.1:{}", port)}};
  auto token = f.create("lagging", 3);
  constexpr uint32_t steps = 60, late_rank = 1;
  std::vector<std::unique_ptr<testing::worker_process>> workers;
  for (uint32_t r = 0; r < 3; ++r) {
    auto a = testing::worker_args::of(f.node.address(), "lagging", r, token);
    a.workers = 3;
    a.steps = steps;
    a.hold_ms = 3000;
    if (r == late_rank) // it sleeps 30 ms before each step: the others wait for it
      a.step_delay_ms = 30;
    workers.push_back(testing::start_worker(a));
  }
  // The first status with every rank past step 5 (the first step, the ranks' start,
  // is not measured: 4 measured steps at least) names rank 1 as the slowest.
  std::string status;
  for (int i = 0; i < 300 && status.empty(); ++i) { // at most ~60 s
    auto s = f.shell(
      "local j = rw.job_status('lagging'); "
      "print(j.clock_min, j.slowest[1] or -1, j.ranks[1].late_ms, j.ranks[2].late_ms, "
      "j.ranks[3].late_ms, j.ranks[2].late_steps)");
    unsigned clock = 0;
    if (s.code == 0 && std::sscanf(s.out.c_str(), "%u", &clock) == 1 && clock >= 6)
      status = s.out;
    else
      std::this_thread::sleep_for(100ms);
  }
  INFO(status);
  REQUIRE(!status.empty());
  unsigned clock = 0, steps_measured = 0;
  int slowest = -2;
  double late0 = 0, late1 = 0, late2 = 0;
  REQUIRE(std::sscanf(status.c_str(), "%u\t%d\t%lf\t%lf\t%lf\t%u", &clock, &slowest,
                      &late0, &late1, &late2, &steps_measured)
          == 6);
  CHECK(slowest == static_cast<int>(late_rank));
  CHECK(late1 >= 15.0); // 30 ms a step, less what the others' own pace hides
  CHECK(late0 < late1 / 2);
  CHECK(late2 < late1 / 2);
  CHECK(steps_measured >= 1);

  // /metrics: rank 1 has the largest rw_job_rank_late_seconds of the job (the
  // snapshot is at most a second old).
  std::map<int, double> late;
  for (int i = 0; i < 50; ++i) { // at most ~10 s
    late = late_samples(get_metrics(port), "lagging");
    if (late.count(late_rank) != 0 && late[late_rank] > 0.015)
      break;
    std::this_thread::sleep_for(200ms);
  }
  REQUIRE(late.count(late_rank) == 1);
  for (auto& [rank, seconds] : late)
    if (rank != static_cast<int>(late_rank))
      CHECK(seconds < late[late_rank]);
  CHECK(late.size() <= 4); // a bounded label set: the 4 slowest ranks
  auto deadline = std::chrono::steady_clock::now() + 90s;
  for (auto& w : workers)
    CHECK(testing::finish(*w, deadline).first == std::optional<int>{0});
}

TEST_CASE("a rank stopped with SIGSTOP is named with its missing chunks in the node's "
          "log and in job status within 2 s of --slow-step-ms",
          "[integration][cluster][status]") {
  constexpr int slow_step_ms = 500;
  fixture f{{"--slow-step-ms", std::to_string(slow_step_ms)}};
  auto token = f.create("stalled", 2);
  std::vector<std::unique_ptr<testing::worker_process>> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    auto a = testing::worker_args::of(f.node.address(), "stalled", r, token);
    a.steps = 400; // 4 s at least: rank 1 is stopped long before its last step
    a.step_delay_ms = 10;
    workers.push_back(testing::start_worker(a));
  }
  // Once both ranks have joined, rank 1 is stopped a moment later, well inside its
  // steps (asking the job's status for a clock first took long enough under ASan, with
  // tests beside it, for both ranks to finish: rank 1 was stopped after its last step).
  // Whether it pushed some steps or none, rank 0's next step waits for it.
  bool both = false;
  for (int i = 0; i < 300 && !both; ++i) { // at most ~30 s
    auto log = f.node.log();
    auto first = log.find("worker joined: job='stalled' id=");
    both = first != std::string::npos
           && log.find("worker joined: job='stalled' id=", first + 1)
                != std::string::npos;
    if (!both)
      std::this_thread::sleep_for(100ms);
  }
  REQUIRE(both);
  std::this_thread::sleep_for(100ms);
  auto mark = f.node.log_mark();
  pid_t stopped = workers[1]->proc->pid();
  REQUIRE(::kill(stopped, SIGSTOP) == 0);
  auto stopped_at = std::chrono::steady_clock::now();
  // The node names it: "... has waited N ms on shard S for rank 1 (K chunks: t/c, ...)".
  bool logged = f.node.wait_for_log_after(mark, "for rank 1 (",
                                          std::chrono::milliseconds(slow_step_ms) + 2s);
  auto took = std::chrono::steady_clock::now() - stopped_at;
  INFO(f.node.log_tail(3000));
  CHECK(logged);
  CHECK(took < std::chrono::milliseconds(slow_step_ms) + 2s);
  // Job status: a step waits for rank 1, its chunks missing; rank 0 is waited for by
  // nobody.
  std::string status;
  for (int i = 0; i < 20 && status.empty(); ++i) {
    auto s = f.shell("local j = rw.job_status('stalled'); "
                     "print(j.ranks[2].waited_ms, j.ranks[2].missing_chunks, "
                     "j.ranks[1].waited_ms, j.slowest[1] or -1)");
    unsigned waited = 0;
    if (s.code == 0 && std::sscanf(s.out.c_str(), "%u", &waited) == 1 && waited > 0)
      status = s.out;
    else
      std::this_thread::sleep_for(100ms);
  }
  ::kill(stopped, SIGCONT);
  INFO(status);
  REQUIRE(!status.empty());
  unsigned waited1 = 0, missing1 = 0, waited0 = 0;
  int slowest = -2;
  REQUIRE(
    std::sscanf(status.c_str(), "%u\t%u\t%u\t%d", &waited1, &missing1, &waited0, &slowest)
    == 4);
  CHECK(waited1 >= static_cast<unsigned>(slow_step_ms));
  CHECK(missing1 >= 1);
  CHECK(waited0 == 0);
  CHECK(slowest == 1);
  // Let go, the job finishes, bitwise as ever.
  auto deadline = std::chrono::steady_clock::now() + 90s;
  for (auto& w : workers)
    CHECK(testing::finish(*w, deadline).first == std::optional<int>{0});
}

TEST_CASE("in a hierarchical job over two racks, a late rank is named by its job rank, "
          "not its index in its rack",
          "[integration][cluster][status][racks]") {
  auto port = free_port(); // rack b's node's /metrics
  testing::rack_cluster c{
    {"a", "b"}, {}, {{}, {"--metrics", fmt::format("127.0.0.1:{}", port)}}};
  std::string err;
  // Racks interleaved: rack b holds ranks 0 and 2, rack a ranks 1 and 3. Rank 2 is the
  // second rank of rack b: a rack's shards count it as 1.
  auto token = c.create("lag-racks", 4, "momentum",
                        "racks = {'a', 'b'}, reduction = 'hierarchical', "
                        "worker_racks = {'b', 'a', 'b', 'a'}",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  constexpr uint32_t late_rank = 2;
  std::vector<std::unique_ptr<testing::worker_process>> workers;
  for (uint32_t r = 0; r < 4; ++r) {
    auto a = testing::worker_args::of(c.nodes[r % 2 == 0 ? 1 : 0]->address(), "lag-racks",
                                      r, token);
    a.workers = 4;
    a.optimizer = "momentum";
    a.rank_racks = "1,0,1,0";
    a.transport = "tcp";
    a.steps = 40;
    a.hold_ms = 3000;
    if (r == late_rank)
      a.step_delay_ms = 30;
    workers.push_back(testing::start_worker(a));
  }
  std::string status;
  for (int i = 0; i < 300 && status.empty(); ++i) { // at most ~60 s
    auto s = c.shell("local j = rw.job_status('lag-racks'); "
                     "print(j.clock_min, j.slowest[1] or -1, j.ranks[3].late_ms, "
                     "j.ranks[2].late_ms)");
    unsigned clock = 0;
    if (s.code == 0 && std::sscanf(s.out.c_str(), "%u", &clock) == 1 && clock >= 8)
      status = s.out;
    else
      std::this_thread::sleep_for(100ms);
  }
  INFO(status);
  REQUIRE(!status.empty());
  unsigned clock = 0;
  int slowest = -2;
  double late2 = 0, late1 = 0;
  REQUIRE(
    std::sscanf(status.c_str(), "%u\t%d\t%lf\t%lf", &clock, &slowest, &late2, &late1)
    == 4);
  CHECK(slowest == static_cast<int>(late_rank));
  CHECK(late2 >= 15.0);
  CHECK(late1 < late2 / 2);
  // Rack b's node labels it by its job rank too.
  std::map<int, double> late;
  for (int i = 0; i < 50; ++i) { // at most ~10 s
    late = late_samples(get_metrics(port), "lag-racks");
    if (late.count(late_rank) != 0 && late[late_rank] > 0.015)
      break;
    std::this_thread::sleep_for(200ms);
  }
  CHECK(late.count(late_rank) == 1);
  CHECK(late.count(1) == 0); // its index in rack b: not a label
  auto deadline = std::chrono::steady_clock::now() + 90s;
  for (auto& w : workers)
    CHECK(testing::finish(*w, deadline).first == std::optional<int>{0});
}

} // namespace rw_integration_stragglers
