#pragma once
// Steps that wait too long (rw-node --slow-step-ms): which ranks a BSP job's open steps
// on one shard have waited for longer than the threshold, and which chunks of theirs
// are missing. The shard logs it once per step (handle_life.cpp, scan_timeouts) and
// puts it in the job's counts (job status, /metrics), so an operator sees who holds a
// job up, and where, long before the step timeout fails it.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actors/shard/job.hpp"

namespace rw::actors::detail {

struct slow_steps {
  /// Chunks named per rank at most (the count goes on).
  static constexpr size_t max_named = 8;
  struct rank_wait {
    std::chrono::nanoseconds waited{0}; // the longest any of its chunks waited
    uint64_t chunks = 0;                // chunks of open steps it has not pushed
    std::vector<std::pair<uint32_t, uint32_t>> named; // (tensor, chunk), the first few
  };
  uint64_t clock = UINT64_MAX; // the oldest waiting step
  std::chrono::nanoseconds waited{0};
  std::map<uint32_t, rank_wait> ranks; // the ranks waited for, by rank
  bool empty() const { return ranks.empty(); }
};

/// The steps of `job`'s chunks homed on shard `index` that, at `now`, have been open
/// at least `threshold` (none when it is zero, or the job is not BSP).
slow_steps find_slow_steps(const shard_job& job, uint32_t index,
                           std::chrono::steady_clock::time_point now,
                           std::chrono::milliseconds threshold);

/// "rank 3 (2 chunks: 0/1, 0/4), rank 5 (40 chunks: 0/0, ... and 32 more)".
std::string slow_steps_text(const slow_steps& s);

} // namespace rw::actors::detail
