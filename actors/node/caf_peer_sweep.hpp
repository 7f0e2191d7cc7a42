#pragma once
// A workaround for CAF 0.17.6 (Debian's): the middleman's BASP broker keeps an entry in
// `basp_broker::spawn_servers` for every remote node it ever met, and never erases it
// when the node goes (purge_state forgets its proxies, not this). Each entry holds a
// helper actor, about 1.1 KiB: a coordinator that every rw-shell invocation, Python
// call and node registration reaches as a new CAF node grew by that much per client
// process for as long as it ran (bench/soak.sh: +7 % RSS over 30 minutes, four shell
// sessions per job). forget_departed_peers drops the entries of nodes the broker no
// longer has a route to, and stops their helpers.
//
// The helper asks the new node's spawn server for its config server and ends when that
// node goes, or after 5 minutes when it never answered (a client that left during the
// handshake). It is hidden (the actor system does not wait for it) and registered by id,
// so one still running when the system is destroyed outlives the scheduler and its
// clock: the registry lets go of it last, and its cleanup calls into the destroyed
// clock (SIGSEGV in ~actor_registry, after "node stopped"). stop_peer_helpers, called
// before a system with a middleman is destroyed, stops every helper and waits for it.

//
// The same look at the broker's routes tells the coordinator which connection each
// process that proved the cluster secret is on now: its trust ends when that
// connection does (none any more, or another one: a process that announces the same
// CAF node id on a new connection proves the secret again).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <functional>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/node_id.hpp>

namespace rw::actors::detail {

/// Posts the sweep to the middleman's own thread (the broker's state is touched there
/// only) and returns at once. No-op without a middleman.
void forget_departed_peers(caf::actor_system& sys);

/// Stops every BASP helper (see above) and waits until each has terminated, `wait` at
/// most; returns how many it stopped. Call it before `sys` is destroyed, from a thread
/// of none of its actors. No-op without a middleman.
size_t stop_peer_helpers(caf::actor_system& sys,
                         std::chrono::milliseconds wait = std::chrono::seconds(2));

/// Posts a look at the middleman's routes to `nodes` and calls `then` on its thread
/// with each one's connection id (-1: no route), in the same order: send yourself a
/// message from it, touch nothing else. No-op without a middleman.
void peer_connections(
  caf::actor_system& sys, std::vector<caf::node_id> nodes,
  std::function<void(std::vector<caf::node_id>, std::vector<int64_t>)> then);

/// Where the middleman's connection to `node` comes from ("HOST:PORT"), for logs; ""
/// if it has none (this process, a node gone, no middleman) or the middleman did not
/// answer within `wait`. Blocks the caller for that long at most: never call it on the
/// middleman's own thread.
std::string peer_address(caf::actor_system& sys, const caf::node_id& node,
                         std::chrono::milliseconds wait = std::chrono::milliseconds(500));

} // namespace rw::actors::detail
