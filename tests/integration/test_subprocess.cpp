// tools::subprocess, as the tests and the bench driver start their children: a child
// given a log file holds none of the parent's output (a node that outlived a crashed
// test once kept ctest reading its pipe until the test's timeout).
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "apps/tools/subprocess.hpp"
#include "tests/support/node_process.hpp"

TEST_CASE("a child given a log file writes its stdout there too, and holds none of the "
          "parent's output",
          "[subprocess]") {
  auto log = rw::testing::temp_path("child.log");
  // The child names what its stdout and stderr are, then writes to each.
  rw::tools::subprocess child{{"/bin/sh", "-c",
                               "readlink /proc/self/fd/1; readlink /proc/self/fd/2 >&2; "
                               "echo to-stdout; echo to-stderr >&2"},
                              false,
                              log};
  auto code = child.wait_until(std::chrono::steady_clock::now()
                               + std::chrono::seconds(10));
  REQUIRE(code == 0);
  std::ifstream in{log};
  std::stringstream text;
  text << in.rdbuf();
  std::remove(log.c_str());
  CHECK_THAT(text.str(), Catch::Contains("to-stdout") && Catch::Contains("to-stderr"));
  // Both descriptors are the log file: twice its path, once per line.
  std::string first, second;
  std::getline(text.seekg(0), first);
  std::getline(text, second);
  CHECK(first == log);
  CHECK(second == log);
}

TEST_CASE("a child whose stdout is captured still hands it over through the pipe",
          "[subprocess]") {
  auto log = rw::testing::temp_path("child-captured.log");
  rw::tools::subprocess child{
    {"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2"}, true, log};
  auto out = child.read_all(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  CHECK(child.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(10))
        == 0);
  CHECK(out == "to-stdout\n");
  std::ifstream in{log};
  std::stringstream text;
  text << in.rdbuf();
  std::remove(log.c_str());
  CHECK(text.str() == "to-stderr\n");
}
