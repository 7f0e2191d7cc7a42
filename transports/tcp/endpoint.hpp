#pragma once
// A TCP endpoint: an epoll set over an optional listening socket and its connections.
// One thread drives it (`poll`); that thread is the only one that reads and the one
// on which the sink is called. Other threads may send on, or close, its connections.

#include <sys/epoll.h>

#include <chrono>
#include <memory>
#include <unordered_map>

#include "transports/tcp/address.hpp"
#include "transports/tcp/connection.hpp"

namespace rw::transports::tcp {

class endpoint final : public transports::endpoint {
public:
  endpoint(std::chrono::milliseconds io_timeout, receive_limits limits);
  ~endpoint();

  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// Starts accepting on `addr`; returns the bound address (port 0 picks one).
  /// Throws with the address and reason (for example, in use).
  address listen(const address& addr);

  /// Connects to `addr` and adds the connection. Throws on failure.
  std::shared_ptr<connection> connect(const address& addr,
                                      std::chrono::milliseconds timeout);

  /// Waits up to `timeout_ms` for readiness, then accepts and reads. Returns the
  /// number of ready descriptors handled.
  int poll(int timeout_ms, frame_sink& sink) override;

  /// Closes every connection (each reported to `sink`) and stops listening.
  void close_all(frame_sink& sink) override;

  size_t connection_count() const noexcept override {
    return conns_.size();
  }

  std::string describe() const override;

private:
  std::shared_ptr<connection> add(int fd, std::string peer);
  void accept_all(frame_sink& sink);
  // Closes accepted connections that delivered no whole frame within the limit.
  void cut_silent(frame_sink& sink);
  void drop(int fd);

  std::chrono::milliseconds io_timeout_;
  receive_limits limits_;
  int epfd_;
  int listen_fd_ = -1;
  address bound_;
  std::unordered_map<int, std::shared_ptr<connection>> conns_;
  using clock = std::chrono::steady_clock;
  // Accepted connections with no whole frame yet, and when each was accepted.
  std::unordered_map<int, clock::time_point> unframed_;
  clock::time_point next_sweep_{};
};

} // namespace rw::transports::tcp
