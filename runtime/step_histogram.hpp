#pragma once
// Step times as a Prometheus histogram: fixed buckets from 1 ms to 60 s, a count and a
// sum (seconds). One per job on a node (actors/rack/steps.cpp observes it).

#include <array>
#include <cstdint>

namespace rw::runtime {

struct step_histogram {
  /// Upper bounds of the buckets, in seconds; a last, implicit one is +Inf.
  static constexpr std::array<double, 15> bounds{
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  /// Observations in each bucket alone (not cumulative); the last is past 60 s.
  std::array<uint64_t, bounds.size() + 1> buckets{};
  uint64_t count = 0;
  double sum = 0;

  void observe(double seconds) noexcept {
    size_t i = 0;
    while (i < bounds.size() && seconds > bounds[i])
      ++i;
    ++buckets[i];
    ++count;
    sum += seconds;
  }
};

} // namespace rw::runtime
