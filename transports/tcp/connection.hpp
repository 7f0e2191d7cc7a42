#pragma once
// A TCP connection: one socket, frames in both directions.
//
// Sending: header and payload pieces go out in one gather write (sendmsg) straight from
// the caller's memory, under a per-connection mutex so frames never interleave; a peer
// that does not read within `io_timeout` gets the connection closed.
// Receiving: `read_ready` runs on the endpoint's thread when the socket is readable; it
// reads the fixed-size header, asks the sink where the payload goes, and reads the
// payload straight there. The socket is closed only when the object dies, so another
// thread still holding the connection can never write to a reused descriptor.

#include <chrono>
#include <mutex>
#include <string>

#include "transports/transport.hpp"

namespace rw::transports::tcp {

class connection final : public transports::connection,
                         public std::enable_shared_from_this<connection> {
public:
  connection(int fd, std::string peer, std::chrono::milliseconds io_timeout,
             receive_limits limits);
  ~connection() override;

  bool send(const frame_header& h, const iovec* payload, int count) override;
  using transports::connection::send;
  bool send_batch(const frame_header* headers, const iovec* payloads, int n) override;
  void close() override;
  bool is_open() const noexcept override;
  const std::string& peer() const noexcept override {
    return peer_;
  }
  bool same_host() const noexcept override;

  int fd() const noexcept {
    return fd_;
  }

  /// Reads what the socket has (bounded per call for fairness). Returns false once the
  /// connection is closed; the sink has then been told exactly once.
  bool read_ready(frame_sink& sink);

  /// Reports the close to the sink if it has not been reported yet.
  void report_closed(frame_sink& sink, errc code, const std::string& why);

  /// Whether a whole frame has come in on it yet (endpoint thread only).
  bool framed() const noexcept { return framed_; }

  /// Tells the peer `why` in an error frame (best effort), closes, reports to the sink.
  void cut(frame_sink& sink, errc code, const std::string& why);

private:
  enum class phase { header, payload };

  bool fail(frame_sink& sink, errc code, const std::string& why, bool tell_peer);
  // Writes the whole gather list (under send_mtx_), bounded by the I/O timeout.
  bool write_all(iovec* iov, int n);

  int fd_;
  std::string peer_;
  std::chrono::milliseconds io_timeout_;
  receive_limits limits_;
  std::mutex send_mtx_;
  std::atomic<bool> open_{true};
  std::atomic<bool> write_failed_{false}; // the peer stopped taking frames
  bool reported_ = false;
  bool framed_ = false; // a whole frame came in

  // Receive state (endpoint thread only).
  phase phase_ = phase::header;
  alignas(8) std::byte header_buf_[frame_header_bytes];
  size_t got_ = 0;
  size_t spill_ = 0; // bytes of the next header read along with a payload
  frame_header header_;
  payload_target target_;
};

} // namespace rw::transports::tcp
