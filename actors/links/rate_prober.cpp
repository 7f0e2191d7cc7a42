#include "actors/links/rate_prober.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "services/rate_probe.hpp"

namespace rw::actors {

namespace {

rate_prober_actor::behavior_type prober_behavior(rate_prober_actor::pointer self,
                                                 std::string from) {
  return {
    [=](probe_atom, const rate_probe_request& req) {
      services::probe_limits limits;
      limits.max_bytes = req.max_bytes;
      limits.burst = std::chrono::milliseconds(req.burst_ms);
      limits.timeout = std::chrono::milliseconds(req.timeout_ms);
      auto m = services::probe_rate(req.address, limits);
      rate_probe_result r{m.ok, m.gbps, m.bytes, m.elapsed_us, m.error};
      if (m.ok)
        spdlog::info(
          "rate probe: from node={} to node={} at {}: {:.3f} Gbit/s ({} bytes in "
          "{:.1f} ms)",
          from, req.target, req.address, m.gbps, m.bytes, m.elapsed_us / 1e3);
      else
        spdlog::warn("rate probe: from node={} to node={} at {} failed: {}", from,
                     req.target, req.address, m.error);
      self->quit();
      return r;
    },
  };
}

} // namespace

rate_prober_actor spawn_rate_prober(caf::actor_system& sys, const std::string& from) {
  // (With an argument: CAF 0.17 spawns an argument-less function actor through a null
  // tuple pointer, undefined behaviour UBSan stops on.)
  return sys.spawn<caf::detached>(prober_behavior, from);
}

} // namespace rw::actors
