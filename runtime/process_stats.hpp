#pragma once
// This process's resident memory, open file descriptors and threads, read from /proc
// (for rw-node's /metrics and its periodic throughput line).

#include <cstdint>

namespace rw::runtime {

struct process_stats {
  uint64_t rss_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0; // the soft RLIMIT_NOFILE
  uint64_t threads = 0;
  double cpu_seconds = 0; // user + system, all threads
};

/// Reads /proc/self; a field it cannot read stays 0.
process_stats read_process_stats();

} // namespace rw::runtime
