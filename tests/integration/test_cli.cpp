// The command-line conventions every program keeps (apps/tools/exit_codes.hpp): exit 0
// ok (and --help, --version), 1 the operation failed, 2 usage, 3 unreachable; --version
// on each program and subcommand; help that shows true defaults.

#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/integration/cluster_fixture.hpp"
#include "transports/tcp/address.hpp"

using namespace rw;

namespace {

testing::shell_run run(const std::vector<std::string>& argv) {
  return testing::run_program(argv, std::chrono::seconds(30));
}

} // namespace

TEST_CASE("every program and subcommand prints its version and exits 0",
          "[integration][cli]") {
  for (auto argv : std::vector<std::vector<std::string>>{{RW_NODE_PATH, "--version"},
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
