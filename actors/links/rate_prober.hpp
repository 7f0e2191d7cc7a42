#pragma once
// Rate prober: one measurement of the rate from this node to another node's data
// plane, for the cluster coordinator's `auto` plan. The probe blocks on its socket for
// up to the request's timeout, so it runs in an actor of its own on its own thread
// (detached): the node's cluster link keeps answering heartbeats meanwhile.
//
// Protocol
//   link -> prober  (probe_atom, rate_probe_request) -> rate_probe_result
//                   sends the burst (services/rate_probe), answers what it
//                   measured or why it failed (never an error message), then quits:
//                   one prober per probe

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/cluster_messages.hpp"

namespace rw::actors {

using rate_prober_actor = caf::typed_actor<
  caf::replies_to<probe_atom, rate_probe_request>::with<rate_probe_result>>;

/// Spawns a prober (detached) for one probe.
rate_prober_actor spawn_rate_prober(caf::actor_system& sys, const std::string& from);

} // namespace rw::actors
