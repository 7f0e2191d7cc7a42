#pragma once
// A TCP connection: one socket, frames in both directions.
//
// Sending: header and payload pieces go out in one gather write (sendmsg) straight from
// the caller's memory, under a per-connection mutex so frames never interleave. What
// the socket does not take at once depends on the connection's send policy:
//  - blocking (a client's connections: a worker, an uplink): the sender waits for the
//    socket, and a peer that takes nothing for `io_timeout` gets the connection closed;
//  - queued (connections a node accepted): the rest is copied into the connection's
//    send_queue and the sender goes on at once: a shard or poller never waits on one
//    peer. The endpoint's thread drains the queue when the socket is writable again
//    (poll_set). A peer whose queue passes `queue_bytes`, or that takes nothing of it
//    for `io_timeout`, is cut off: that connection is closed, nobody else waits.
// Receiving: `read_ready` runs on the endpoint's thread when the socket is readable; it
// reads the fixed-size header, asks the sink where the payload goes, and reads the
// payload straight there. The socket is closed only when the object dies, so another
// thread still holding the connection can never write to a reused descriptor.

#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transports/byte_budget.hpp"
#include "transports/tcp/poll_set.hpp"
#include "transports/tcp/send_queue.hpp"
#include "transports/transport.hpp"

namespace rw::transports::tcp {

/// What a send does when the socket does not take the whole frame at once.
struct send_policy {
  /// How long a peer may take nothing before its connection is closed.
  std::chrono::milliseconds io_timeout{defaults::io_timeout_ms};
  /// 0: the sender waits for the socket. Else the rest is queued (copied), at most this
  /// many bytes per connection; `waker` (the endpoint's epoll set) drains it.
  uint64_t queue_bytes = 0;
  std::shared_ptr<poll_set> waker;
};

class connection final : public transports::connection,
                         public std::enable_shared_from_this<connection> {
public:
  connection(int fd, std::string peer, send_policy policy, receive_limits limits);
  ~connection() override;

  bool send(const protocol::frame_header& h, const iovec* payload, int count) override;
  using transports::connection::send;
  bool send_batch(const protocol::frame_header* headers, const iovec* payloads,
                  int n) override;
  void close() override;
  bool is_open() const noexcept override;
  const std::string& peer() const noexcept override { return peer_; }
  bool same_host() const noexcept override;

  int fd() const noexcept { return fd_; }

  /// Backpressure (an accepted connection): while paused, the endpoint takes no more
  /// frames from this peer (a frame half read is finished); its bytes wait in the
  /// socket and then in the peer's. Any thread.
  void pause_reading(bool paused) override;

  /// Reads what the socket has (bounded per call for fairness). Returns false once the
  /// connection is closed; the sink has then been told exactly once.
  bool read_ready(frame_sink& sink);

  /// Reports the close to the sink if it has not been reported yet.
  void report_closed(frame_sink& sink, errc code, const std::string& why);

  /// Whether a whole frame has come in on it yet (endpoint thread only).
  bool framed() const noexcept { return framed_; }

  /// An accepted connection: its peer is a stranger until the sink admits it, its
  /// frames are timed while it has not joined, and what it gathers counts against
  /// `budget` meanwhile (null: counted nowhere). Endpoint thread, before any read.
  void treat_as_stranger(std::shared_ptr<byte_budget> budget);

  void admit(admission a) override;
  admission admitted() const noexcept {
    return admission_.load(std::memory_order_acquire);
  }

  /// Why a peer that has not joined has overstayed, or "" (endpoint thread): a frame
  /// begun more than `limit` ago and not whole yet, or (a stranger, not waiting on
  /// this side) nothing begun for `limit`, or the connection held as a stranger for
  /// defaults::stranger_lifetimes x `limit` in all (however often it sent).
  std::string overstayed(std::chrono::steady_clock::time_point now,
                         std::chrono::milliseconds limit) const;

  /// Tells the peer `why` in an error frame (best effort), closes, reports to the sink.
  void cut(frame_sink& sink, errc code, const std::string& why);

  /// The socket can take more (endpoint thread): writes what is queued; once the queue
  /// is empty the endpoint stops watching for it.
  void write_ready();

  /// Cuts the peer off if it took nothing of its queue for the I/O timeout (endpoint
  /// thread, now and then). True if it was cut.
  bool check_stalled(std::chrono::steady_clock::time_point now);

  /// Bytes queued for the peer now (a gauge for stats).
  size_t queued_bytes() const;

private:
  enum class phase { header, payload };

  // A gathered payload: room for `bytes` more of it (charged to the budget while the
  // peer has not joined). False if the budget has none.
  bool grow_gather(size_t bytes);
  // The gathered payload was handed over: its memory goes back.
  void release_gather() noexcept;
  // Whether this connection's frames are timed now: accepted, and not joined (a joined
  // worker's data path reads no clock for it).
  bool timing() const noexcept { return timed_ && admitted() != admission::joined; }

  bool fail(frame_sink& sink, errc code, const std::string& why, bool tell_peer);
  // The end of a read round that went well: what it took is acknowledged now
  // (ack_now) if `took`. Returns true.
  bool done_reading(bool took) noexcept;
  // Writes the gather list under send_mtx_: all of it (blocking), or what the socket
  // takes, queueing the rest (queued).
  bool write(iovec* iov, int n);
  bool write_all(iovec* iov, int n);
  bool write_or_queue(iovec* iov, int n);
  // Writes what is queued, as far as the socket takes it (send_mtx_ held). False if
  // the connection failed.
  bool flush_queue();
  // Stops this side's writing for good and remembers why (unless `why` is empty); the
  // receiving side reports it as the close's reason (send_mtx_ held).
  bool give_up(errc code, std::string why);
  // Gives up (errc::timeout, `why`) and closes both directions: a peer that does not
  // read is cut off. Returns false (send_mtx_ held).
  bool cut_off(std::string why);
  std::pair<errc, std::string> why_writing_stopped() const;

  using clock = std::chrono::steady_clock;

  int fd_;
  std::string peer_;
  send_policy policy_;
  receive_limits limits_;
  mutable std::mutex send_mtx_;
  send_queue queue_;                // guarded by send_mtx_
  clock::time_point last_progress_; // the queue last shrank, or filled (send_mtx_)
  // Why writing stopped: a lock of its own, so a reader never waits on a sender that
  // is blocked in a write (a client's connection).
  mutable std::mutex reason_mtx_;
  errc give_up_code_ = errc::ok;
  std::string give_up_why_;
  std::atomic<bool> open_{true};
  std::atomic<bool> write_failed_{false};   // the peer stopped taking frames
  bool paused_ = false;                     // reading paused (send_mtx_)
  std::atomic<bool> reading_paused_{false}; // paused_, for the reading thread
  bool reported_ = false;
  bool framed_ = false; // a whole frame came in

  // Receive state (endpoint thread only).
  phase phase_ = phase::header;
  alignas(8) std::byte header_buf_[protocol::frame_header_bytes];
  size_t got_ = 0;
  size_t spill_ = 0; // bytes of the next header read along with a payload
  protocol::frame_header header_;
  payload_target target_;

  // Peers that have not joined (accepted connections only; endpoint thread).
  std::atomic<admission> admission_{admission::joined};
  bool timed_ = false; // accepted: a stranger's frames are timed
  std::shared_ptr<byte_budget> budget_;
  std::vector<std::byte> gather_;     // a gathered payload, taken as it arrives
  uint64_t gather_charged_ = 0;       // of it, what the budget holds for us
  clock::time_point frame_started_{}; // the current frame's first byte came
  clock::time_point quiet_since_{};   // accepted, or the last frame was whole
  // Time held as a stranger (not while waiting for this side), for the total bound.
  clock::duration stranger_time_{};
  clock::time_point stranger_since_{}; // a stranger (again) since then
};

} // namespace rw::transports::tcp
