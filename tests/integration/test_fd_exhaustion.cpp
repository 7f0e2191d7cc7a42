// A node out of file descriptors (issue 34): its listener once stayed readable with
// connections it could not accept and spun a core. Only the plain build runs this
// (label `plain`, its own program rw-plain-tests: the integration programs need not be
// built for it): UBSan checks a dynamic type through a pipe (IsAccessibleMemoryRange),
// finds no descriptor to open it with, and reports a bad vptr that is not there.

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/node_checks.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_fd_exhaustion {

using namespace rw;
using testing::check_node_serves;
using testing::cpu_seconds;

TEST_CASE("a node out of file descriptors does not spin on its listener",
          "[integration][bad][hostile][plain]") {
  testing::node_process node;
  auto pid = node.process().pid();
  // The node serves a job first: whatever it opens on its own once running (its
  // registration with the coordinator it embeds, a worker's first connections) is open
  // before the squeeze, which then hits only the listener.
  check_node_serves(node.address(), "before-emfile");
  // Leave the node 8 descriptors more than it has open now.
  size_t open_now = 0;
  for (auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid))) {
    (void)e;
    ++open_now;
  }
  rlimit old{};
  REQUIRE(::prlimit(pid, RLIMIT_NOFILE, nullptr, &old) == 0);
  rlimit tight = old;
  tight.rlim_cur = open_now + 8;
  REQUIRE(::prlimit(pid, RLIMIT_NOFILE, &tight, nullptr) == 0);
  std::vector<std::unique_ptr<testing::raw_client>> waiting;
  for (int i = 0; i < 24; ++i)
    waiting.push_back(std::make_unique<testing::raw_client>(node.address()));
  REQUIRE(node.wait_for_log("cannot accept connections: Too many open files"));
  auto cpu0 = cpu_seconds(pid);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto cpu = cpu_seconds(pid) - cpu0;
  INFO("the node's CPU over 2 s while its listener had connections it could not accept: "
       << cpu << " s");
  // A level-triggered listener once spun a core: about 2 s. An idle node takes about
  // 0.12 s here (its pollers' 2 ms waits), more under ASan: half a core is the line.
  CHECK(cpu < 1.0);
  REQUIRE(::prlimit(pid, RLIMIT_NOFILE, &old, nullptr) == 0);
  waiting.clear();
  INFO("the node's log, last 4000 characters:\n" << node.log_tail(4000));
  check_node_serves(node.address(), "after-emfile");
}

} // namespace rw_integration_fd_exhaustion
