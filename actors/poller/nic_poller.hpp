#pragma once
// NIC poller: owns one transport endpoint (its sockets, its receive buffers) and is the
// only reader of it. Payloads land straight in pooled chunk buffers; the poller hands
// the owning shard a reference, never a copy. Shards answer workers directly on the
// connection (sends are thread-safe and bounded in time), so the poller's mailbox
// carries only control traffic.
//
// Protocol
//   poller -> poller       (poll_atom)  one round of the endpoint: accept, read, dispatch;
//                          blocks in the endpoint only while the mailbox is empty
//   anyone -> poller       (stop_atom)  close every connection, then quit
//   poller -> coordinator  (hello_atom, hello_request) -> job_binding
//                          then a `welcome` (the node's endpoints and routing table, an
//                          attach token) or an `error` frame to the worker
//   poller -> coordinator  (attach_atom, attach_request) -> job_binding
//                          a worker joining this further endpoint with its token
//   poller -> shard        (push_atom | init_atom, chunk_push), (pull_atom, chunk_pull)
//                          for frames of a joined connection, checked against its job's
//                          routing table first (job, rank, tensor, chunk, length); the
//                          pushes of one round go to each shard together
//                          (push_atom, [chunk_push]), sent before any other message of
//                          the round, so a shard sees each connection's frames in order
//   poller -> coordinator  (leave_atom, job_id, rank, graceful, reason) on close
//   supervisor -> poller   (replace_atom, index, shard)  shard `index` was restarted
//   coordinator -> poller  (reroute_atom, route_change)  a job's routes changed (a
//                          drain): its connections take the new routes and get a
//                          `reroute` frame (and are closed if the job left the node);
//                          answered once done, so frames read after the answer are
//                          checked by the new routes
//   node -> poller         (cut_atom, job_id, rank) -> connections closed
//                          fault injection (rw.inject kill = 'link'): closes the
//                          connections of the job's worker `rank` (UINT32_MAX: every
//                          rank), as a cut link would; the workers say hello again
//   anyone -> poller       (stats_atom) -> poller_stats   where it runs, its buffers
//   node -> TCP poller     (shm_atom, shm poller, doorbell name, handover)
//                          colocated workers may offer shared memory: a hello naming a
//                          segment on this host gets it adopted by the shm poller, and
//                          its welcome a ticket to collect the doorbell (and the job's
//                          parameters) from the handover
//   TCP poller -> shm poller (adopt_atom, connection, job_binding, rank)
//                          serve this worker's segment (its TCP connection stays for
//                          control and liveness; closing it releases the segment)
//   node -> TCP poller     (fabric_atom, fabric poller, fabric endpoint)
//                          the node runs a libfabric endpoint: welcomes of one-node and
//                          hierarchical jobs advertise its provider, and a joined
//                          worker's `fabric` frame (its FabricOffer) gets a connection
//                          made on that endpoint and the node's offer back
//   TCP poller -> fabric poller (adopt_atom, fabric connection, TCP connection,
//                          job_binding, rank) serve this worker's fabric connection,
//                          bound like its TCP one; either closing closes the other (the
//                          TCP connection's poller reports the leave)
//   node -> poller         `probe` frames: another node's rate probe (poller/probe.cpp);
//                          payloads discarded into one scratch buffer, the last frame
//                          answered with an `ack` carrying the bytes taken; bounded per
//                          frame, per connection and in probes at once
// Restart: a poller that dies is restarted by its NUMA supervisor on the same endpoint
// with the same book: every connection stays open and bound to its (job, rank), so
// workers notice nothing but a pause; frames sit in the sockets meanwhile. Lost with
// the dead poller: admissions it was waiting on (those workers time out and retry).
// A frame that fails a check gets an `error` frame; a stream that cannot be trusted
// any more (bad magic, oversized length, truncation) is closed. Other connections are
// unaffected.

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "actors/rack/rack_coordinator.hpp"
#include "runtime/topology.hpp"
#include "transports/shm/handover.hpp"
#include "transports/transport.hpp"

namespace rw::actors {

using nic_poller_actor = caf::typed_actor<
  caf::reacts_to<poll_atom>, caf::reacts_to<stop_atom>,
  caf::reacts_to<replace_atom, uint32_t, chunk_shard_actor>,
  caf::replies_to<stats_atom>::with<poller_stats>,
  caf::reacts_to<shm_atom, caf::actor, std::string,
                 std::shared_ptr<transports::shm::handover>>,
  caf::reacts_to<adopt_atom, transports::connection_ptr, job_binding, uint32_t>,
  caf::reacts_to<fabric_atom, caf::actor, std::shared_ptr<transports::endpoint>>,
  caf::reacts_to<adopt_atom, transports::connection_ptr, transports::connection_ptr,
                 job_binding, uint32_t>,
  caf::replies_to<reroute_atom, route_change>::with<ok_atom>,
  caf::replies_to<cut_atom, uint32_t, uint32_t>::with<uint32_t>>;

struct poller_settings {
  std::string node_name;
  uint32_t endpoint_index = 0;
  std::vector<std::string> endpoints; // every endpoint of the node, for welcomes
  uint32_t max_control_bytes = defaults::max_control_bytes;
  int block_ms = defaults::poll_block_ms;
  std::shared_ptr<const runtime::topology> topo; // null: not pinned
  runtime::core_info core;
  uint32_t numa = 0;             // where receive buffers live
  uint32_t prealloc_buffers = 0; // of defaults::chunk_bytes, at start
  bool priority = true;    // read the worker furthest behind first when several are ready
  std::string thread_name; // empty: rw-poll-<endpoint_index>
};

namespace detail {
struct poller_book;
}

/// A new, empty poller book (actors/poller/sink.hpp): what a poller holds beyond its
/// endpoint, kept by its supervisor too so a restarted poller goes on with it.
std::shared_ptr<detail::poller_book> make_poller_book();

/// Spawns a poller as a detached actor driving `ep`; it pins itself to settings.core
/// first and exits with the reason if it cannot. It keeps its bindings, buffer pools
/// and the handles it learnt in `book` (null: a new one); a book another poller held
/// before (it died) is adopted, and the coordinator and shards given are then ignored
/// for the ones the book holds.
nic_poller_actor spawn_nic_poller(caf::actor_system& sys, poller_settings settings,
                                  std::shared_ptr<transports::endpoint> ep,
                                  rack_coordinator_actor coordinator,
                                  std::vector<chunk_shard_actor> shards,
                                  std::shared_ptr<detail::poller_book> book = nullptr);

} // namespace rw::actors
