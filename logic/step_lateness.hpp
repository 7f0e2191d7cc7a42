#pragma once
// Which ranks of a BSP job come late, as one shard sees it: for each step (clock), when
// each rank's last chunk push of that step arrived here. Once every rank has pushed
// every chunk of a step that the shard serves, each rank's lateness in that step is the
// time its last chunk arrived after the earliest rank's last chunk; it is folded into
// the rank's figures (the newest step, the mean of the last `window` steps, the largest,
// the count). The rank a job waits for has the largest figures; ranks that are never
// late show 0. The first step measured is not folded in: its arrivals differ by when
// each rank's process started and joined, not by how fast it steps.
//
// Plain logic, no actors: the shard calls arrived() for each push it counts and reads
// figures() for job status and /metrics (the node takes each rank's largest over its
// shards). Bounded: at most `max_open` steps are followed at once (a step some rank
// never completes, because it left, is dropped when a later one needs the room).

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace rw::actors::detail {

class step_lateness {
public:
  using clock_type = std::chrono::steady_clock;
  /// Steps whose arrivals are followed at once.
  static constexpr size_t max_open = 4;
  /// Steps the recent mean is taken over.
  static constexpr size_t window = 8;

  /// A rank's figures, in nanoseconds.
  struct figures {
    uint64_t last_ns = 0;   // the newest step measured
    uint64_t recent_ns = 0; // mean of the last `window` steps measured
    uint64_t max_ns = 0;    // the largest since the job began here
    uint64_t steps = 0;     // steps measured
  };

  step_lateness() = default;
  explicit step_lateness(uint32_t ranks);

  /// A step just measured: its clock, when its earliest rank's last chunk came, and
  /// the slowest rank and when its last chunk came.
  struct measured {
    uint64_t clock = 0;
    clock_type::time_point first{};
    uint32_t slowest = 0;
    clock_type::time_point last{};
  };

  /// Rank `rank`'s push for `clock` of one chunk was counted at `at`. A step is
  /// measured once `ranks_in` ranks (the ranks still in the job; those that left push
  /// nothing) have each pushed `chunks` chunks of it (the chunks the shard serves);
  /// then it is returned.
  std::optional<measured> arrived(uint32_t rank, uint64_t clock,
                                  clock_type::time_point at, size_t chunks,
                                  uint32_t ranks_in);

  /// Rank `rank`'s figures (all zero before its first measured step).
  const figures& of(uint32_t rank) const;
  uint32_t ranks() const { return static_cast<uint32_t>(ranks_.size()); }
  /// Steps measured here (every rank's arrivals complete), the first one included.
  uint64_t steps() const { return steps_; }

private:
  struct open_step {
    uint64_t clock = 0;
    std::vector<clock_type::time_point> last; // by rank: its latest chunk's arrival
    std::vector<uint32_t> chunks;             // by rank: chunks of the step it pushed
    uint32_t complete = 0;                    // ranks with every chunk in
  };
  struct rank_state {
    figures f;
    std::deque<uint64_t> recent; // the last `window` steps' lateness
    uint64_t recent_sum = 0;
  };
  open_step* step_of(uint64_t clock); // null: not followed (older than every open one)
  measured measure(const open_step& s);

  std::vector<rank_state> ranks_;
  std::deque<open_step> open_; // by clock, lowest first
  uint64_t steps_ = 0;
};

} // namespace rw::actors::detail
