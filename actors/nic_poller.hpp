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
//                          then a `welcome` or `error` frame to the worker
//   poller -> shard        (push_atom | init_atom, chunk_push), (pull_atom, chunk_pull)
//                          for frames of a joined connection, checked against its job's
//                          routing table first (job, rank, tensor, chunk, length)
//   poller -> coordinator  (leave_atom, job_id, rank, graceful, reason) on close
// A frame that fails a check gets an `error` frame; a stream that cannot be trusted
// any more (bad magic, oversized length, truncation) is closed. Other connections are
// unaffected.

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/chunk_shard.hpp"
#include "actors/rack_coordinator.hpp"
#include "transports/transport.hpp"

namespace rw::actors {

using nic_poller_actor = caf::typed_actor<caf::reacts_to<poll_atom>,
                                          caf::reacts_to<stop_atom>>;

struct poller_settings {
  std::string node_name;
  uint32_t max_control_bytes = defaults::max_control_bytes;
  int block_ms = defaults::poll_block_ms;
};

/// Spawns a poller as a detached actor driving `ep`.
nic_poller_actor spawn_nic_poller(caf::actor_system& sys, poller_settings settings,
                                  std::shared_ptr<transports::endpoint> ep,
                                  rack_coordinator_actor coordinator,
                                  std::vector<chunk_shard_actor> shards);

} // namespace rw::actors
