#pragma once
// A chunk shard's outgoing answers (updates and acks to workers, a replica's acks to a
// chunk's home), gathered so that a shard serving many chunks in one message sends each
// peer's answers in one gather write rather than one system call per chunk, every
// peer's posted before any is waited for (connection::post_batch). flush() returns once
// every payload has been read: none is in flight when the parameters change.
//
// While a `holding` scope lives (a poller's batch of pushes, a few backlog pushes, a
// replica's acks), send() keeps each frame; when the outermost scope ends they go out,
// per connection, in the order they were made. A held update points at its chunk's
// parameters (no copy): before a step changes them, points_at() says so and flush()
// sends what is held first; so does dropping a job. Outside a scope send() sends at once.
//
// Replica acks (flag_replica) have their own list: the shard sends itself a flush
// message when the first is added (add_replica_ack returns true), so the acks of every
// mirrored sum queued behind it go out together (flush_replica_acks).

#include <unordered_set>
#include <utility>
#include <vector>

#include <sys/uio.h>

#include "transports/transport.hpp"

namespace rw::actors::detail {

class shard_answers {
public:
  /// Sends `h` (with `payload`, a chunk's parameters, if any) now, or holds it while a
  /// holding scope lives. False: the send failed (never while holding).
  bool send(const transports::connection_ptr& conn, const protocol::frame_header& h,
            iovec payload = {nullptr, 0});
  /// As send, for a payload made from the parameters at `params` (their 16-bit packing):
  /// points_at(params) holds while it is held.
  bool send(const transports::connection_ptr& conn, const protocol::frame_header& h,
            iovec payload, const float* params);
  /// Sends what is held, each connection's frames in one gather write.
  void flush();
  /// Whether a held frame points at these parameters.
  bool points_at(const float* params) const {
    return !held_params_.empty() && held_params_.count(params) > 0;
  }

  /// Holds what send() is given while it lives; the outermost one flushes at its end.
  class holding {
  public:
    explicit holding(shard_answers& a) : a_(a), outer_(a.holding_) { a_.holding_ = true; }
    ~holding() {
      if (outer_)
        return;
      a_.holding_ = false;
      a_.flush();
    }
    holding(const holding&) = delete;
    holding& operator=(const holding&) = delete;

  private:
    shard_answers& a_;
    bool outer_;
  };

  /// Keeps a replica's ack; true if it is the first since the last flush_replica_acks
  /// (the shard then sends itself the message that flushes them).
  bool add_replica_ack(const transports::connection_ptr& conn,
                       const protocol::frame_header& h);
  /// Sends the replica acks kept, per connection in one gather write.
  void flush_replica_acks();

private:
  struct held_frame {
    transports::connection_ptr conn;
    protocol::frame_header header;
    iovec payload;
  };
  // Sends `frames` (given each frame's connection), per connection in order; clears it.
  template <class Frame, class Conn, class Header, class Payload>
  static void send_grouped(std::vector<Frame>& frames, Conn conn_of, Header header_of,
                           Payload payload_of);

  bool holding_ = false;
  std::vector<held_frame> held_;
  std::unordered_set<const float*> held_params_;
  std::vector<std::pair<transports::connection_ptr, protocol::frame_header>>
    replica_acks_;
};

} // namespace rw::actors::detail
