#pragma once
// NUMA domain supervisor: spawns and monitors one NUMA domain's chunk shards and NIC
// pollers (each a detached actor pinned to a core of the domain, with its memory on
// the domain).
//
// Protocol
//   node -> supervisor  (get_atom) -> std::vector<chunk_shard_actor>
//                       the domain's shards, spawned at start, in the order configured
//   node -> supervisor  (start_atom, coordinator, all shards) -> std::vector<nic_poller_actor>
//                       spawns the domain's pollers (they need every shard of the node)
//   node -> supervisor  (peers_atom, coordinator, all pollers)
//                       whom to tell when a shard is replaced
//   node -> supervisor  (stop_atom) -> ok_atom
//                       stops the pollers (connections closed), then the shards; answers
//                       once every child is down
// Monitoring: a shard that dies is logged and respawned on its core with its state: the
// supervisor keeps each shard's book (actors/shard/job.hpp) and hands it to the
// successor, which goes on with every job whose state is whole (chunk_shard.hpp,
// "Restart"). The new handle is announced (replace_atom, index, shard) to the
// coordinator and to every poller, which asks its workers to re-send what the dead
// shard's mailbox held. A poller that dies is logged and respawned on its endpoint with
// its book (nic_poller.hpp, "Restart"): its connections stay open and bound.

#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "actors/poller/nic_poller.hpp"
#include "actors/rack/rack_coordinator.hpp"

namespace rw::actors {

using get_atom = caf::atom_constant<caf::atom("get")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;

using numa_supervisor_actor = caf::typed_actor<
  caf::replies_to<get_atom>::with<std::vector<chunk_shard_actor>>,
  caf::replies_to<start_atom, rack_coordinator_actor,
                  std::vector<chunk_shard_actor>>::with<std::vector<nic_poller_actor>>,
  caf::reacts_to<peers_atom, rack_coordinator_actor, std::vector<nic_poller_actor>>,
  caf::replies_to<stop_atom>::with<ok_atom>>;

struct supervised_endpoint {
  poller_settings settings;
  std::shared_ptr<transports::endpoint> ep;
};

struct supervisor_settings {
  uint32_t numa = 0;
  std::vector<shard_settings> shards; // settings.index is the node-wide index
  std::vector<supervised_endpoint> endpoints;
};

numa_supervisor_actor spawn_numa_supervisor(caf::actor_system& sys,
                                            supervisor_settings settings);

} // namespace rw::actors
