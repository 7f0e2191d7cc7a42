#pragma once
// Worker proxy: the training process's side of RackWeave. It owns the worker's clocks
// and per-tensor queues of operations, cuts each operation into per-chunk frames sent
// straight from the caller's buffer, and completes the caller's future when the
// receiver (worker_link, on its own thread) has seen every chunk answered.
//
// Protocol
//   facade   -> proxy  (submit_atom, worker_op)   queue an operation; its promise is
//                      fulfilled or failed exactly once. Operations on one tensor run
//                      one at a time, in order; different tensors overlap.
// The receiver (worker_link, on its own thread) tells the proxy through link_events,
// whose implementation here (events_of) sends these messages:
//   receiver -> proxy  (done_atom, tensor, seq)   every chunk of operation `seq` arrived
//   receiver -> proxy  (fail_atom, tensor, seq, errc, message)
//                      the node answered operation `seq` with an error frame
//   receiver -> proxy  (lost_atom, errc, message) the connection is gone: every pending
//                      and later operation fails with the reason
//   proxy    -> proxy  (timeout_atom, tensor, seq) no answer in time: the connection is
//                      closed (the stream is stuck), which fails everything via lost_atom
//   facade   -> proxy  (bye_atom) -> ok_atom       send bye after what is queued was sent
//   receiver -> proxy  (resend_atom, conn, shard)  shard `shard` of the node behind
//                      connection `conn` restarted: every chunk of a running operation
//                      it serves whose answer has not come is sent again (same clock);
//                      shard UINT32_MAX: the link said hello to that node again (its
//                      connections had closed), so every chunk homed or mirrored there
//   receiver -> proxy  (reroute_atom, conn)  the job's nodes changed (the link routes
//                      by the new ring already): every chunk of a running operation now
//                      homed on the node behind `conn` whose answer has not come is sent
//                      there again (same clock; answers already counted are repeated)
//   receiver -> proxy  (window_atom, tensor, seq, 0)  enough of operation `seq`'s chunks
//                      are answered: its push window moves on (worker/chunk_sender)
//   proxy    -> proxy  (window_atom, tensor, seq, pause)  max_window_wait after pause
//                      `pause`: the rest of the operation goes out unpaced
// Before a resend or a reroute, every paused operation's rest goes out unpaced. No
// handler waits: the proxy is free for the next message at once.

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/typed_actor.hpp>

#include "actors/messages.hpp"
#include "protocol/data_frame.hpp"
#include "worker/link_events.hpp"

namespace rw::actors {

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using bye_atom = caf::atom_constant<caf::atom("bye")>;
using window_atom = caf::atom_constant<caf::atom("window")>;

struct worker_op {
  using kind_t = protocol::data_op; // the frame that carries it: protocol::frame_for
  static constexpr kind_t init = kind_t::init, push = kind_t::push, pull = kind_t::pull,
                          push_pull = kind_t::push_pull;
  kind_t kind;
  uint32_t tensor;
  const float* src;     // init, push, push_pull: the caller's values (dense)
  float* dst;           // pull, push_pull: where the result goes
  uint64_t min_version; // pull: at least this version; with only_changed: newer than it
  std::shared_ptr<std::promise<void>> done;
  // Sparse push / push_pull: values[i] added at element indices[i] (src is null).
  bool sparse = false;
  const uint64_t* indices = nullptr;
  const float* values = nullptr;
  size_t count = 0;
  bool only_changed = false; // pull: only chunks newer than min_version
  bool subscribe = false;    // pull: subscribe (done once sent; the tensor stays free)
  // No frame: the tensor's pushes go on from clock min_version (worker::go_on_from),
  // after the operations queued before it.
  bool sets_clock = false;
  // A push of a topk job, made sparse when it starts (worker/compression): the
  // pairs picked, which indices and values then point at.
  std::vector<uint64_t> picked_indices;
  std::vector<float> picked_values;
};

class worker_link;

using worker_proxy_actor = caf::typed_actor<
  caf::reacts_to<submit_atom, worker_op>, caf::reacts_to<done_atom, uint32_t, uint64_t>,
  caf::reacts_to<fail_atom, uint32_t, uint64_t, errc, std::string>,
  caf::reacts_to<lost_atom, errc, std::string>,
  caf::reacts_to<timeout_atom, uint32_t, uint64_t>,
  caf::reacts_to<window_atom, uint32_t, uint64_t, uint64_t>,
  caf::reacts_to<resend_atom, uint32_t, uint32_t>,
  caf::reacts_to<reroute_atom, uint32_t, bool>, caf::replies_to<bye_atom>::with<ok_atom>>;

/// What the link (worker_link::start) tells `proxy` through.
std::shared_ptr<link_events> events_of(worker_proxy_actor proxy);

/// `push_window_bytes` (0: none): how far a push_pull's chunks may run ahead of those
/// answered (not with `layerwise`, whose answers wait for the whole tensor).
worker_proxy_actor spawn_worker_proxy(caf::actor_system& sys,
                                      std::shared_ptr<worker_link> link,
                                      std::chrono::milliseconds request_timeout,
                                      uint64_t start_clock = 0,
                                      uint64_t push_window_bytes = 0,
                                      bool layerwise = false);

} // namespace rw::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::worker_op)
