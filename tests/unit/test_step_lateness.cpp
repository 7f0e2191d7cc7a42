// logic/step_lateness: which ranks of a BSP job come late, per step.

#include <catch2/catch.hpp>

#include "logic/step_lateness.hpp"

namespace {

using rw::actors::detail::step_lateness;
using clock_type = step_lateness::clock_type;
using std::chrono::milliseconds;

constexpr uint64_t ms = 1'000'000; // in ns

} // namespace

TEST_CASE("step_lateness: a step is measured once every rank pushed every chunk, each "
          "rank's lateness is its last chunk after the earliest rank's last",
          "[step_lateness]") {
  step_lateness late{3};
  auto t0 = clock_type::now();
  // The first step (the ranks' start) is measured and not folded in.
  for (uint32_t r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c)
      late.arrived(r, 0, t0 - milliseconds(100 * (r + 1)), 2, 3);
  REQUIRE(late.steps() == 1);
  CHECK(late.of(2).steps == 0);
  CHECK(late.of(0).max_ns == 0);
  // Two chunks. Rank 0's last at +2 ms, rank 1's at +1 ms, rank 2's at +31 ms.
  CHECK(!late.arrived(0, 1, t0, 2, 3));
  CHECK(!late.arrived(1, 1, t0 + milliseconds(1), 2, 3));
  CHECK(!late.arrived(0, 1, t0 + milliseconds(2), 2, 3));
  CHECK(!late.arrived(1, 1, t0, 2, 3)); // out of order: the latest counts
  CHECK(!late.arrived(2, 1, t0 + milliseconds(3), 2, 3));
  CHECK(late.steps() == 1);
  auto m = late.arrived(2, 1, t0 + milliseconds(31), 2, 3);
  REQUIRE(m);
  CHECK(m->clock == 1);
  CHECK(m->slowest == 2);
  CHECK(m->first == t0 + milliseconds(1));
  CHECK(m->last == t0 + milliseconds(31));
  CHECK(late.of(0).last_ns == 1 * ms);
  CHECK(late.of(1).last_ns == 0);
  CHECK(late.of(2).last_ns == 30 * ms);
  CHECK(late.of(2).recent_ns == 30 * ms);
  CHECK(late.of(2).max_ns == 30 * ms);
  CHECK(late.of(2).steps == 1);
  CHECK(late.steps() == 2);
  CHECK(late.of(7).steps == 0); // no such rank: nothing
}

TEST_CASE("step_lateness: the recent figure is the mean of the last 8 steps, the largest "
          "is kept",
          "[step_lateness]") {
  step_lateness late{2};
  auto t = clock_type::now();
  for (uint64_t c = 0; c < 11; ++c) {
    t += milliseconds(100);
    late.arrived(0, c, t, 1, 2);
    // Rank 1: 90 ms late in the first step (not folded in), 40 ms in the next two,
    // 10 ms after.
    REQUIRE(late.arrived(1, c, t + milliseconds(c == 0 ? 90 : c < 3 ? 40 : 10), 1, 2));
  }
  CHECK(late.of(1).steps == 10);
  CHECK(late.of(1).recent_ns == 10 * ms); // steps 3..10
  CHECK(late.of(1).max_ns == 40 * ms);
  CHECK(late.of(1).last_ns == 10 * ms);
  CHECK(late.of(0).recent_ns == 0);
}

TEST_CASE("step_lateness: steps interleave (a chunk one clock ahead of another), a rank "
          "that left is not waited for, and a step never completed is given up on",
          "[step_lateness]") {
  step_lateness late{2};
  auto t = clock_type::now();
  for (uint32_t r = 0; r < 2; ++r) // the first step: not folded in
    for (int c = 0; c < 2; ++c)
      late.arrived(r, 9, t, 2, 2);
  // Chunk 0 of clock 1 comes before chunk 1 of clock 0.
  late.arrived(0, 0, t, 2, 2);
  late.arrived(1, 0, t, 2, 2);
  late.arrived(0, 1, t + milliseconds(5), 2, 2);
  late.arrived(0, 0, t + milliseconds(1), 2, 2);
  REQUIRE(late.arrived(1, 0, t + milliseconds(4), 2, 2));
  CHECK(late.of(1).last_ns == 3 * ms);

  // Rank 1 leaves: the ranks still in are 1, so rank 0 alone completes a step.
  step_lateness alone{2};
  alone.arrived(0, 9, t, 1, 2); // the first step: not folded in
  alone.arrived(1, 9, t, 1, 2);
  alone.arrived(1, 0, t, 1, 2); // rank 1 pushed clock 0, then left
  REQUIRE(alone.arrived(0, 0, t + milliseconds(2), 1, 1));
  CHECK(alone.of(1).last_ns == 0);
  CHECK(alone.of(0).last_ns == 2 * ms);

  // Rank 1 never completes clock 0 (it left before pushing it): once max_open later
  // steps are followed, clock 0 is dropped, and a late push of it is not followed.
  step_lateness stuck{2};
  stuck.arrived(0, 9, t, 1, 2); // the first step: not folded in
  stuck.arrived(1, 9, t, 1, 2);
  stuck.arrived(0, 0, t, 1, 2);
  for (uint64_t c = 1; c <= step_lateness::max_open; ++c)
    stuck.arrived(0, c, t, 1, 2);
  CHECK(!stuck.arrived(1, 0, t, 1, 2)); // clock 0 was given up on: not followed
  CHECK(stuck.steps() == 1);
  REQUIRE(stuck.arrived(1, 1, t + milliseconds(7), 1, 2)); // clock 1 still is
  CHECK(stuck.of(1).last_ns == 7 * ms);
}
