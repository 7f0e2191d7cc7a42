#pragma once
// The rate probe's sending side: how fast bytes get from this host to another node's
// --listen endpoint, measured rather than configured (as PLink probes the network).
//
// Exchange (on the ordinary data plane, protocol/frame.hpp)
//   prober -> node  `probe` frames of at most defaults::probe_frame_bytes of payload,
//                   until `max_bytes` are sent or `burst` has passed, whichever first;
//                   then a `probe` frame with flag_want_result (no payload)
//   node -> prober  `ack` whose clock is the probe bytes the node took on the
//                   connection, or an `error` frame (too many probes, too many bytes)
// The rate is the bytes the node acknowledged over the time from the first byte sent
// to the ack's arrival: the path's throughput, TCP's slow start included (a short burst
// on a path with a large bandwidth-delay product reads low).

#include <chrono>
#include <cstdint>
#include <string>

#include "rackweave/defaults.hpp"

namespace rw::services {

struct probe_limits {
  uint32_t max_bytes = defaults::probe_bytes;
  std::chrono::milliseconds burst{defaults::probe_burst_ms};
  /// The whole probe, connecting and the answer included, ends within about this long.
  std::chrono::milliseconds timeout{defaults::probe_timeout_ms};
};

struct probe_outcome {
  bool ok = false;
  uint64_t bytes = 0;      // acknowledged by the node
  uint64_t elapsed_us = 0; // first byte sent to the ack
  double gbps = 0;         // bytes * 8 / elapsed, in Gbit/s
  std::string error;       // why it failed, for the plan and the log
};

/// Probes the node at `node` (HOST:PORT). Blocks for at most about limits.timeout;
/// never throws: a failure is an outcome with ok false and the reason.
probe_outcome probe_rate(const std::string& node, const probe_limits& limits = {});

} // namespace rw::services
