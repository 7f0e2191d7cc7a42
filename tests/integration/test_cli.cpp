// The command-line conventions every program keeps (apps/tools/exit_codes.hpp): exit 0
// ok (and --help, --version), 1 the operation failed, 2 usage, 3 unreachable; --version
// on each program and subcommand; help that shows true defaults.

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "apps/tools/crash_report.hpp"
#include "apps/tools/subprocess.hpp"

#include "rackweave/worker.hpp"
#include "tests/support/bench_json.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/job_options.hpp"
#include "transports/tcp/address.hpp"

namespace rw_integration_cli {

using namespace rw;

namespace {

testing::shell_run run(const std::vector<std::string>& argv) {
  return testing::run_program(argv, std::chrono::seconds(30));
}

} // namespace

TEST_CASE("every program and subcommand prints its version and exits 0",
          "[integration][cli]") {
  for (auto argv :
       std::vector<std::vector<std::string>>{{RW_NODE_PATH, "--version"},
                                             {RW_SHELL_PATH, "--version"},
                                             {RW_BENCH_PATH, "--version"},
                                             {RW_BENCH_PATH, "comm", "--version"}}) {
    auto r = run(argv);
    INFO(argv[0] << " " << argv[1] << ": " << r.out << r.err);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(" " RW_VERSION));
  }
}

TEST_CASE("usage errors exit 2 in every program", "[integration][cli]") {
  struct usage {
    std::vector<std::string> argv;
    std::string says;
  };
  const std::vector<usage> cases{
    {{RW_NODE_PATH, "--no-such-flag"}, "--no-such-flag"},
    {{RW_NODE_PATH, "--shards", "many"}, "--shards"},
    {{RW_SHELL_PATH, "--connect", "localhost", "-c", "print(1)"}, "localhost"},
    {{RW_SHELL_PATH, "--connect", "localhost:0", "-c", "print(1)"}, "needs a port"},
    {{RW_BENCH_PATH}, "subcommand"},
    {{RW_BENCH_PATH, "comm", "--workers"}, "--workers"},
  };
  for (auto& u : cases) {
    auto r = run(u.argv);
    std::string command;
    for (auto& a : u.argv)
      command += a + " ";
    INFO(command << ": " << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(u.says, Catch::CaseSensitive::No));
  }
}

TEST_CASE("rw-node's help shows the true default of each on/off option",
          "[integration][cli]") {
  auto r = run({RW_NODE_PATH, "--help"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("{false}") == std::string::npos);
  for (auto flag : {"--pin", "--shm", "--priority"}) {
    auto at = r.out.find(std::string("  ") + flag + " ");
    INFO(flag);
    REQUIRE(at != std::string::npos);
    CHECK(r.out.substr(at, r.out.find('\n', at) - at).find("(default: on)")
          != std::string::npos);
  }
}

TEST_CASE("a busy control port is named, with what to do, not a raw CAF error",
          "[integration][cli]") {
  int held = transports::tcp::listen_on(transports::tcp::parse_address("127.0.0.1:0"));
  auto busy = "127.0.0.1:" + std::to_string(transports::tcp::bound_port(held));
  auto r = run({RW_NODE_PATH, "--listen", "127.0.0.1:0", "--control", busy});
  ::close(held);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("cannot open the control port " + busy)
                      && Catch::Contains("--control HOST:PORT"));
  CHECK(r.err.find("system_error") == std::string::npos);
}

TEST_CASE("rw-bench says whether it could not reach the cluster (3) or was misused (2)",
          "[integration][cli]") {
  auto nobody = run({RW_BENCH_PATH, "comm", "--connect", "127.0.0.1:1", "--iters", "1",
                     "--timeout-s", "20"});
  INFO(nobody.err);
  CHECK(nobody.code == 3);
  CHECK_THAT(nobody.err, Catch::Contains("127.0.0.1:1"));
  auto misused = run({RW_BENCH_PATH, "comm", "--connect", "127.0.0.1:1", "--bytes", "6"});
  INFO(misused.err);
  CHECK(misused.code == 2);
  CHECK_THAT(misused.err, Catch::Contains("--bytes"));
}

TEST_CASE("rw-bench joins a job made with rw.job_create, given its token file",
          "[integration][cli]") {
  testing::node_process node{{}, {"rack-agg", false}}; // no --open-jobs: tokens only
  auto made = testing::run_shell(
    {"--connect", node.address(), "-c",
     "local j = rw.job_create{name = 'made-by-shell', "
     "workers = 2, chunk_bytes = '64KiB', optimizer = 'sum'}; "
     "print(j.token)"});
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto dir = testing::scratch_dir("rw-bench-token");
  auto token_file = dir + "/token";
  {
    std::ofstream out{token_file};
    out << made.out.substr(0, made.out.find('\n')) << "\n";
  }
  ::chmod(token_file.c_str(), 0600);
  std::vector<std::string> bench{
    RW_BENCH_PATH, "comm",    "--connect",    node.address(),  "--workers",
    "2",           "--bytes", "256KiB",       "--chunk-bytes", "64KiB",
    "--iters",     "3",       "--verify",     "--json",        "--timeout-s",
    "60",          "--job",   "made-by-shell"};
  // Without the token, rw-bench would make the job itself: the name is taken.
  auto taken = testing::run_program(bench, std::chrono::seconds(90));
  INFO(taken.err);
  CHECK(taken.code == 2);
  CHECK_THAT(taken.err, Catch::Contains("made-by-shell"));
  auto with_token = bench;
  with_token.insert(with_token.end(), {"--token-file", token_file});
  auto joined = testing::run_program(with_token, std::chrono::seconds(90));
  INFO(joined.err);
  CHECK(joined.code == 0);
  CHECK(testing::bench_json(joined.out)["verified"] == true);
  // The job stays: it was not rw-bench's to delete.
  auto status = testing::run_shell(
    {"--connect", node.address(), "-c", "print(rw.job_status('made-by-shell').state)"});
  CHECK(status.out == "finished\n");
  // Misuse: a token without the job's name, with --open-job, or unreadable.
  auto no_job = run(
    {RW_BENCH_PATH, "comm", "--connect", node.address(), "--token-file", token_file});
  CHECK(no_job.code == 2);
  CHECK_THAT(no_job.err, Catch::Contains("--token-file needs --job"));
  auto both = run({RW_BENCH_PATH, "comm", "--connect", node.address(), "--job", "x",
                   "--token-file", token_file, "--open-job"});
  CHECK(both.code == 2);
  auto missing = run({RW_BENCH_PATH, "comm", "--connect", node.address(), "--job", "x",
                      "--token-file", dir + "/none"});
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Catch::Contains("cannot read a job token"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rw-bench's help says what the node needs", "[integration][cli]") {
  auto help = run({RW_BENCH_PATH, "comm", "--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("--open-jobs"));
  CHECK_THAT(help.out, Catch::Contains("--token-file"));
  CHECK_THAT(help.out, Catch::Contains("rw.job_create"));
}

TEST_CASE("a shell or worker pointed at the control port is told what that port is",
          "[integration][cli]") {
  testing::node_process node{{}, {"rack-agg", false}};
  auto where = testing::run_shell(
    {"--connect", node.address(), "-c", "print(rw.coordinator())"});
  REQUIRE(where.code == 0);
  auto control = where.out.substr(0, where.out.find('\n'));
  REQUIRE(control != node.address());
  auto shell = testing::run_shell({"--connect", control, "-c", "print(#rw.nodes())"});
  INFO(shell.err);
  CHECK(shell.code == 3);
  CHECK_THAT(shell.err, Catch::Contains("control port") && Catch::Contains("--listen"));
  try {
    worker_options o;
    o.connect = control;
    o.job.name = "wrong-port";
    o.job.num_workers = 1;
    o.job.tensors = {{"w", 16, false}};
    o.request_timeout = std::chrono::milliseconds(10000);
    worker w{o};
    FAIL("a worker joined through the control port");
  } catch (const rw::error& e) {
    CHECK_THAT(e.what(), Catch::Contains("control port") && Catch::Contains("--listen"));
  }
}

TEST_CASE("an rw-node that dies of a fault says so in its log and fails the test that "
          "started it",
          "[integration][cli]") {
  // With --fabric too: libfabric loads libpsm2, whose constructor installs handlers for
  // the faults, SIGINT and SIGTERM that call exit(1). The node puts its own back.
  for (bool fabric : {false, true}) {
    INFO((fabric ? "--fabric tcp" : "no fabric"));
    auto log = testing::temp_path("fault.log");
    auto port = testing::temp_path("fault.port");
    std::vector<std::string> argv{RW_NODE_PATH,  "--role",   "rack-agg",    "--listen",
                                  "127.0.0.1:0", "--no-pin", "--port-file", port};
    if (fabric)
      for (auto& a : testing::fabric_node_args())
        argv.push_back(a);
    tools::subprocess node{argv, false, log};
    for (int i = 0; i < 200 && testing::read_file(port).empty(); ++i) // at most 10 s
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE_FALSE(testing::read_file(port).empty());
    node.signal(SIGSEGV);
    auto status = node.wait_until(std::chrono::steady_clock::now()
                                  + std::chrono::seconds(10));
    auto text = testing::read_file(log);
    INFO(text);
    REQUIRE(status);
    // What node_process's stop (and rwnode.py's) sees: the fault, or the sanitizer's.
    auto why = testing::crash_of(status, text);
    if (tools::crash_report_enabled) {
      CHECK(*status == 128 + SIGSEGV);
      CHECK(why == "died of SIGSEGV");
      CHECK_THAT(text, Catch::Contains("rw-node: fatal signal SIGSEGV")
                         && Catch::Contains("backtrace:"));
    } else {
      CHECK_THAT(why, Catch::StartsWith("logged a sanitizer report"));
    }
    CHECK_THAT(text, !Catch::Contains("terminated with signal")); // libpsm2's report
    std::remove(log.c_str());
    std::remove(port.c_str());
  }
  // A node that stopped on SIGTERM, or that the test killed, did not crash.
  CHECK(testing::crash_of(0, "").empty());
  CHECK(testing::crash_of(128 + SIGKILL, "").empty());
}

TEST_CASE("a worker on the fabric transport leaves the process's signal handlers as "
          "they were",
          "[integration][cli][fabric]") {
  // A training process's own Ctrl-C and SIGTERM handling, and its fault handling, stay
  // its own when the worker loads libfabric (and libfabric libpsm2).
  testing::node_process node{testing::fabric_node_args()};
  struct sigaction mine {};
  mine.sa_handler = [](int) {};
  sigemptyset(&mine.sa_mask);
  std::vector<int> kept{SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT};
  std::vector<struct sigaction> before(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] == SIGINT || kept[i] == SIGTERM) // a handler of the program's own
      REQUIRE(::sigaction(kept[i], &mine, &before[i]) == 0);
    else
      REQUIRE(::sigaction(kept[i], nullptr, &before[i]) == 0);
  }
  {
    auto o = testing::job_options(node.address(), "signals", 0, "fabric", 1024, 1);
    worker w{o};
    std::vector<float> grad(1024, 1.0f), out(1024);
    w.push_pull("t", grad.data(), out.data()).get();
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    struct sigaction now {};
    REQUIRE(::sigaction(kept[i], nullptr, &now) == 0);
    INFO("signal " << kept[i]);
    CHECK(reinterpret_cast<void*>(now.sa_handler)
          == reinterpret_cast<void*>(kept[i] == SIGINT || kept[i] == SIGTERM
                                       ? mine.sa_handler
                                       : before[i].sa_handler));
  }
  for (size_t i = 0; i < kept.size(); ++i)
    if (kept[i] == SIGINT || kept[i] == SIGTERM)
      ::sigaction(kept[i], &before[i], nullptr);
}

} // namespace rw_integration_cli
