#pragma once
// The transport contract. Every backend (transports/tcp, transports/shm,
// transports/fabric) implements the same three classes in its own folder:
//
//  - `connection`: one peer, full duplex, framed (protocol/frame.hpp). `send` is safe
//    to call from any thread; frames from different threads never interleave; a send
//    blocks at most the transport's I/O timeout and never copies the payload (gather
//    list straight from the caller's memory). `close` may be called from any thread: it
//    stops the connection, and the receiving side then reports it closed exactly once.
//  - `endpoint`: the receiving side, a set of connections driven by one thread.
//  - `frame_sink`: what the receiving side calls, on its own thread only. It first sees
//    the decoded, validated header and says where the payload goes (so payloads land
//    straight in their final buffer), then sees the whole frame, and finally the close.

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/frame.hpp"
#include "rackweave/defaults.hpp"
#include "rackweave/errc.hpp"
#include "runtime/buffer_pool.hpp"

namespace rw::transports {

/// Where a received payload goes.
///  - receive: into `dst` (payload_bytes of writable memory the sink holds);
///  - gather: into memory of the connection's own, taken only as the bytes arrive (a
///    header that announces 1 MiB and sends nothing holds nothing), and counted against
///    the node's budget for peers that have not joined (admission); `dst` points at it
///    in on_frame, valid until on_frame returns. For control payloads (hello, proof,
///    attach): each connection lands them apart, so no connection's frame can move or
///    overwrite another's half-read one;
///  - discard: read and dropped; close: the connection ends.
struct payload_target {
  enum action_t { receive, discard, close, gather };
  action_t action = receive;
  std::byte* dst = nullptr; // for receive: payload_bytes of writable memory
  runtime::buffer_ref keep; // the pooled buffer `dst` points into, if any

  static payload_target into(std::byte* dst) { return {receive, dst, {}}; }
  static payload_target into(runtime::buffer_ref buf) {
    auto* p = buf->bytes();
    return {receive, p, std::move(buf)};
  }
  static payload_target dropped() { return {discard, nullptr, {}}; }
  static payload_target closing() { return {close, nullptr, {}}; }
  static payload_target gathered() { return {gather, nullptr, {}}; }
};

/// How far a peer that connected to this side has come. An endpoint bounds what a peer
/// that has proven nothing may hold (transports/tcp/endpoint.hpp): a `stranger` sends
/// each frame whole within the frame deadline, may not sit idle, and the payloads it
/// has gathered count against the node's budget for peers that have not joined; a
/// `waiting` peer's hello, attach or proof is being decided (it waits for this side, so
/// it may be idle); a `joined` one is bound to a job and checked by the job's rules.
enum class admission : uint8_t { stranger, waiting, joined };

class connection {
public:
  connection();
  virtual ~connection() = default;

  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Sends one frame: the header, then `count` payload pieces. Returns false (and
  /// closes the connection) if the peer failed or did not read within the timeout.
  virtual bool send(const protocol::frame_header& h, const iovec* payload, int count) = 0;

  /// Stops the connection from any thread; the receiver reports the close.
  virtual void close() = 0;

  virtual bool is_open() const noexcept = 0;

  /// The peer's address, for logs.
  virtual const std::string& peer() const noexcept = 0;

  /// Whether the peer runs on this host (and could share memory with us).
  virtual bool same_host() const noexcept { return false; }

  /// Whether frames on this connection carry no payload bytes over a wire: the peer
  /// reads them in shared memory (transports/shm), so compressing them saves nothing.
  virtual bool resident() const noexcept { return false; }

  /// Sends a header-only frame.
  bool send(const protocol::frame_header& h) { return send(h, nullptr, 0); }

  /// Where this side wants the results (updates) of `tensor` to land: [dst, dst +
  /// bytes), chunk c at dst + c * chunk_bytes. A transport that can write into its
  /// peer's memory (fabric) tells the peer, and the updates' payloads arrive already
  /// there (a sink's target that is that memory needs no copy); others ignore it.
  /// False if the connection failed.
  virtual bool place_results(uint32_t tensor, float* dst, uint64_t bytes,
                             uint32_t chunk_bytes) {
    (void)tensor, (void)dst, (void)bytes, (void)chunk_bytes;
    return true;
  }

  /// Backpressure from the receiver: while paused, take no more frames from this peer
  /// (any thread). Transports whose peers cannot send more than the receiver gave
  /// room for (fabric credits, shared-memory rings) ignore it, as do client sides.
  virtual void pause_reading(bool paused) { (void)paused; }

  /// How far the peer has come (the sink says, on the receiving thread or the thread
  /// that drives it); accepted connections start as strangers. Transports whose peers
  /// joined before they had a connection (fabric, shared memory) ignore it.
  virtual void admit(admission a) { (void)a; }

  /// Sends `n` frames, frame i being headers[i] and the one piece payloads[i] (an empty
  /// piece for none), as one write where the backend can. Same guarantees as send.
  virtual bool send_batch(const protocol::frame_header* headers, const iovec* payloads,
                          int n);

  /// send_batch in two halves, so that a caller with frames for several peers has them
  /// all in flight at once: post_batch may return while its payloads are still being
  /// read (fabric: the RMA writes posted, their completions not yet reaped), with a
  /// mark; the payloads stay untouched until wait_sent(mark) has returned. `ok` is
  /// false if a frame could not be posted (the connection is closed then). A transport
  /// that sends at once (tcp, shm) returns 0, and wait_sent(0) returns at once.
  virtual uint64_t post_batch(const protocol::frame_header* headers,
                              const iovec* payloads, int n, bool& ok) {
    ok = send_batch(headers, payloads, n);
    return 0;
  }
  /// Waits until every frame posted up to `mark` has been read from the caller's
  /// memory, at most the transport's I/O timeout; false (the connection closed) if not.
  virtual bool wait_sent(uint64_t mark) {
    (void)mark;
    return true;
  }

  /// Sends an error frame about `about` (its job, rank, tensor, chunk and clock).
  bool send_error(errc code, const std::string& message,
                  const protocol::frame_header& about,
                  const std::vector<std::string>& candidates = {});

  /// A process-unique id, for logs and maps.
  uint64_t id() const noexcept { return id_; }

private:
  uint64_t id_;
};

using connection_ptr = std::shared_ptr<connection>;

class frame_sink {
public:
  virtual ~frame_sink() = default;

  /// A header arrived. Answer with where its payload goes; `closing()` ends the
  /// connection (send any error frame first).
  virtual payload_target on_header(const connection_ptr& c,
                                   const protocol::frame_header& h) = 0;

  /// The frame's payload (if any) is in `t`.
  virtual void on_frame(const connection_ptr& c, const protocol::frame_header& h,
                        payload_target& t) = 0;

  /// The connection is gone. `code` is errc::ok for an orderly close by the peer.
  virtual void on_closed(const connection_ptr& c, errc code, const std::string& why) = 0;

  /// Service order when several connections are ready at once: lower first (the
  /// worker furthest behind). The default keeps the order the transport saw them in.
  virtual uint64_t priority(const connection_ptr& c) const { return 0; }

  /// A frame whose payload is already in memory this process can read (shared
  /// memory): `payload` is that memory, by reference. The default copies it through
  /// on_header / on_frame; sinks that can use it in place override this.
  virtual void on_resident_frame(const connection_ptr& c, const protocol::frame_header& h,
                                 runtime::buffer_ref payload);
};

/// The receiving side of a transport: a set of connections driven by one thread.
class endpoint {
public:
  virtual ~endpoint() = default;

  /// Takes over a connection another endpoint's peer set up (an shm segment offered
  /// over TCP). Thread-safe. Endpoints that cannot adopt throw std::logic_error.
  virtual void adopt(connection_ptr c);

  /// Waits up to `timeout_ms` for readiness, then accepts and reads, calling `sink`
  /// on this thread. Returns the number of ready descriptors handled.
  virtual int poll(int timeout_ms, frame_sink& sink) = 0;

  /// Closes every connection (each reported to `sink`) and stops accepting.
  virtual void close_all(frame_sink& sink) = 0;

  virtual size_t connection_count() const noexcept = 0;

  /// Where peers reach this endpoint, for logs ("tcp://127.0.0.1:7700").
  virtual std::string describe() const = 0;
};

/// Limits a receiver enforces on every header before reading a payload.
struct receive_limits {
  uint32_t max_data_payload;    // push, init, update
  uint32_t max_control_payload; // hello, welcome, error
  /// An accepted connection that has not joined a job sends each frame whole within
  /// this long of its first byte, and (a stranger) is not idle this long, connecting
  /// included: else it is closed; 0: never.
  uint32_t first_frame_ms = defaults::first_frame_ms;
};

} // namespace rw::transports
