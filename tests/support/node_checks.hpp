#pragma once
// What the hostile-client and bad-input tests check on a node after an attack: that it
// still serves a fresh job, and what it costs in memory and CPU (from /proc).

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"

namespace rw::testing {

/// A fresh single-worker job `job` (one 3000-element tensor, over TCP) runs a step to
/// completion at `address`: the node still serves.
inline void check_node_serves(const std::string& address, const std::string& job) {
  worker w{job_options(address, job, 0, "tcp", 3000, 1)};
  std::vector<float> g(3000, 2.0f), out(3000, 0.0f);
  w.push_pull("t", g.data(), out.data()).get();
  CHECK(out[0] == 2.0f);
  CHECK(out[2999] == 2.0f);
}

/// A process's resident memory (KiB), from /proc/PID/status.
inline uint64_t rss_kib(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/status", pid)};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6));
  return 0;
}

/// A process's CPU time (user + system, s), from /proc/PID/stat.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/stat", pid)};
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest{all.substr(all.rfind(')') + 2)};
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14)
      utime = std::stoull(field);
    if (i == 15)
      stime = std::stoull(field);
  }
  return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

} // namespace rw::testing
