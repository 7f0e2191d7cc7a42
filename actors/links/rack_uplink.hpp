#pragma once
// A rack-agg's part in the top level of a hierarchical job. The node serves the job to
// its rack's workers as a rack job: its shards sum the rack's gradients per chunk, in
// rank order. The uplink joins the job's top job (every node of the job, chunks homed
// by the ring as in a flat job) as one participant, rank = the rack's index, like a
// worker would (actors/links/job_join), and relays:
//
// Protocol
//   shard  -> uplink  push(tensor, chunk, clock, partial)   (a call, on the shard's
//                     thread) the rack's partial sum of a chunk, as soon as the rack's
//                     workers are all in: sent to the chunk's home as a push_pull of
//                     `clock`. `partial` is the chunk's relay buffer: the home's answer
//                     is received into it (no copy), and the shard leaves it alone
//                     until that answer has come.
//   shard  -> uplink  init(tensor, chunk, values)   rank 0's initial values (rack 0)
//   uplink -> home    push (want result) / init / pull of version 0, on the data plane
//   home   -> uplink  update: the chunk's new parameters, received into its relay
//                     buffer (version 0, the initial values: into a buffer of its own);
//                     then
//   uplink -> shard   (relay_atom, relay_update) the shard owning the chunk installs
//                     them as the rack job's next version and answers its workers
//   uplink -> coordinator (abort_atom, job, errc, why)  the top level failed (a node
//                     refused or vanished): the rack job fails with the reason
// Chunks of tensors with initial values are pulled at version 0 from their home (the
// racks other than rack 0 learn the initial values that way). Until the join is done
// pushes and inits wait in the uplink. Every chunk streams on its own: no barrier over
// a tensor anywhere. Sends go out from a sender thread of the uplink's, in the order
// shards handed them over, so a shard never waits on a slow link to a chunk's home.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actors/shard/chunk_shard.hpp"
#include "actors/shard/outbox.hpp"
#include "actors/links/job_join.hpp"
#include "actors/links/relay_slots.hpp"
#include "actors/messages.hpp"
#include "transports/receive_scratch.hpp"

namespace rw::actors {

struct uplink_settings {
  join_request join;        // the top job, this rack's rank, the job's token
  uint32_t rack_job_id = 0; // the rack job on this node
  routing_ptr rack_routes;  // which of this node's shards owns which chunk
  std::vector<chunk_shard_actor> shards;
  abort_sink coordinator; // told when the top level fails
  std::string node_name;  // for logs
};

class rack_uplink final : public transports::frame_sink, public chunk_relay {
public:
  explicit rack_uplink(uplink_settings s);
  ~rack_uplink() override;

  /// Joins the top job and relays, on a thread of its own.
  void start();
  /// Leaves the top job (bye) and joins the thread. Idempotent.
  void stop();

  // chunk_relay (the rack job's shards)
  void push(uint32_t tensor, uint32_t chunk, uint64_t clock, float* partial) override;
  void init(uint32_t tensor, uint32_t chunk, const float* values) override;

  // frame_sink (the uplink's thread)
  transports::payload_target on_header(const transports::connection_ptr& c,
                                       const protocol::frame_header& h) override;
  void on_frame(const transports::connection_ptr& c, const protocol::frame_header& h,
                transports::payload_target& t) override;
  void on_closed(const transports::connection_ptr& c, errc code,
                 const std::string& why) override;

private:
  struct pending {
    protocol::frame_header h;
    const float* data;
    std::vector<float> copy; // init values, kept until sent
  };
  void run();
  void drain();
  void enqueue(pending p);
  void send(pending& p);
  void fail(errc code, const std::string& why);
  std::string node_of(const transports::connection_ptr& c); // its node's name, for logs
  uint64_t seq(uint32_t tensor, uint32_t chunk) const noexcept {
    return first_[tensor] + chunk;
  }

  uplink_settings s_;
  std::shared_ptr<transports::tcp::endpoint> ep_;
  joined_job joined_;
  std::vector<uint64_t> first_;   // chunk number of each tensor's chunk 0
  std::vector<uint32_t> lengths_; // by chunk number: its floats
  // By chunk number: the relay buffer of the partial in flight, which the home's
  // answer to it lands in, once (mtx_). Any other update is dropped.
  relay_slots slots_{0};
  // The update on_header just dropped as not asked for (tensor, chunk, version): its
  // on_frame lets it go (the receiver thread's).
  std::optional<std::tuple<uint32_t, uint32_t, uint64_t>> stray_;
  std::unordered_map<uint64_t, std::shared_ptr<std::vector<float>>>
    initials_; // receiving
  std::mutex mtx_;
  bool ready_ = false;
  std::deque<pending> queued_; // for the sender thread
  std::condition_variable wake_;
  // An error frame's text, per connection (the receiver thread's).
  transports::receive_scratch<> errors_;
  std::atomic<bool> running_{false};
  std::atomic<bool> failed_{false};
  std::thread thread_;
  std::thread sender_;
};

} // namespace rw::actors
