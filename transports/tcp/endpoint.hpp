#pragma once
// A TCP endpoint: an epoll set over an optional listening socket and its connections.
// One thread drives it (`poll`); that thread is the only one that reads and the one
// on which the sink is called, and it writes what its connections' send queues hold
// when their sockets can take it. Other threads may send on, or close, its
// connections. Connections it accepts queue what their sockets do not take (a node
// never waits on one peer); connections it makes block their sender (a client).

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "transports/tcp/address.hpp"
#include "transports/tcp/connection.hpp"

namespace rw::transports::tcp {

/// How an endpoint serves the connections it accepts.
struct accept_policy {
  /// What an accepted connection may hold queued for its peer before the peer is cut
  /// off (0: accepted connections block their sender too).
  uint64_t send_queue_bytes = 0;
  /// Connections one host (IP address; every loopback address is one host) may hold to
  /// the endpoint; more are refused (0: no limit).
  uint32_t max_per_host = 0;
  /// Accepted connections that have not joined a job and are not waiting for this side
  /// (strangers, transports::admission) the endpoint holds at once; past this a new
  /// one is closed at once.
  uint32_t max_strangers = defaults::max_stranger_connections;
  /// Of those, what one host (as for max_per_host) may hold; past this a new one from
  /// that host is closed at once (0: no share, only max_strangers).
  uint32_t max_strangers_per_host = defaults::max_peer_strangers;
  /// What the payloads strangers gather may hold, shared by every endpoint of the node
  /// (null: not bounded past each frame's size).
  std::shared_ptr<byte_budget> stranger_bytes;
};

class endpoint final : public transports::endpoint {
public:
  endpoint(std::chrono::milliseconds io_timeout, receive_limits limits,
           accept_policy accepting = {});
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

  size_t connection_count() const noexcept override { return conns_.size(); }

  std::string describe() const override;

private:
  std::shared_ptr<connection> add(int fd, std::string peer, uint64_t queue_bytes);
  void accept_all(frame_sink& sink);
  // Closes accepted connections that have not joined and overstayed: a frame not whole,
  // or a stranger idle, for the limit (receive_limits::first_frame_ms).
  void cut_overstayed(frame_sink& sink);
  // Strangers held now (connections not joined and not waiting); forgets the joined.
  /// Strangers held now; with `host`, only those from that host (host_key).
  size_t count_strangers(const std::string* host = nullptr);
  // Accepting failed for want of descriptors or memory: stop watching the listener for
  // a while (it stays readable: a level-triggered wait would spin on it).
  void pause_accepting(int error);
  // Cuts off peers that took nothing of their send queue for the I/O timeout.
  void cut_stalled();
  void drop(int fd);

  std::chrono::milliseconds io_timeout_;
  receive_limits limits_;
  accept_policy accepting_;
  std::shared_ptr<poll_set> set_;
  // Accepted connections per host (their IP address), for max_per_host, and each
  // accepted connection's host.
  std::unordered_map<std::string, uint32_t> per_host_;
  std::unordered_map<int, std::string> host_of_;
  int listen_fd_ = -1;
  address bound_;
  std::unordered_map<int, std::shared_ptr<connection>> conns_;
  using clock = std::chrono::steady_clock;
  // Accepted connections not known to have joined a job yet.
  std::unordered_set<int> unjoined_;
  clock::time_point next_sweep_{};
  clock::time_point accept_paused_until_{}; // listener unwatched until then
  bool accept_paused_ = false;
  uint64_t accept_failures_ = 0; // since the last line logged about them
  clock::time_point accept_failure_logged_{};
  clock::time_point next_stall_check_{};
};

} // namespace rw::transports::tcp
