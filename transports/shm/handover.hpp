#pragma once
// Handing the node's shared memory to proven workers only: file descriptors passed over
// a unix socket (SCM_RIGHTS), never names another process could open. The node offers
// a welcome's segments under a ticket (32 random bytes, sent in that welcome, so only a
// worker that proved itself on its connection holds it); the worker connects to the
// node's socket, sends the ticket and receives the descriptors. Wire format:
// docs/wire-protocol.md, "Shared memory handover".

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/credentials.hpp"

namespace rw::transports::shm {

/// A segment to hand over: this process's name for it (/proc/PID/fd/N of its memfd,
/// mapping::name()) and whether the receiver may write it.
struct handover_segment {
  std::string name;
  bool read_only = true;
};

/// Bounds of the node's handover socket: whoever can reach it is a stranger until it
/// sends a ticket.
struct handover_limits {
  size_t max_connections = 64; // open at once; more wait in the backlog
  std::chrono::milliseconds connection_time{2000}; // to send the ticket
  size_t max_tickets = 4096;                       // outstanding; more evict the oldest
  std::chrono::milliseconds ticket_life{30000};    // a welcome's worker takes it sooner
};

/// The node side: a unix socket in the abstract namespace under a random name, served
/// by a thread of its own. Thread-safe.
class handover {
public:
  static constexpr size_t ticket_bytes = runtime::nonce_bytes;

  /// Binds the socket and starts the thread. Throws std::runtime_error.
  explicit handover(handover_limits limits = {});
  ~handover();
  handover(const handover&) = delete;
  handover& operator=(const handover&) = delete;

  /// The socket's address for welcomes: "@" and the abstract name.
  const std::string& address() const noexcept { return address_; }

  /// Opens `segments` now (this process's own memfds, read-only where asked) and keeps
  /// them under a new ticket, taken once within the ticket's life. Throws
  /// std::runtime_error when one cannot be opened.
  std::string offer(const std::vector<handover_segment>& segments);

  /// Tickets not yet taken (for tests and stats).
  size_t outstanding() const;
  /// Tickets refused so far: unknown, expired, used, or not sent in time.
  uint64_t refused() const noexcept { return refused_.load(); }

private:
  struct offered {
    std::string ticket;
    std::vector<int> fds;
    std::chrono::steady_clock::time_point expires;
  };
  struct stranger {
    int fd;
    std::chrono::steady_clock::time_point deadline;
    std::string got; // ticket bytes so far
  };
  void run();
  void serve(stranger& s); // reads what came; answers and closes once the ticket is in
  void answer(int fd, const std::string& ticket);
  void expire_tickets(std::chrono::steady_clock::time_point now);
  void report(std::chrono::steady_clock::time_point now); // refusals, once a minute
  static void close_all(std::vector<int>& fds) noexcept;

  handover_limits limits_;
  std::string address_;
  int listener_ = -1;
  int wake_[2] = {-1, -1}; // a pipe: the destructor ends the thread's poll
  mutable std::mutex mtx_;
  std::vector<offered> tickets_; // in the order offered (the oldest is evicted first)
  std::vector<stranger> strangers_;
  std::atomic<uint64_t> refused_{0};
  std::chrono::steady_clock::time_point next_report_{};
  uint64_t reported_ = 0; // refusals already in the log
  std::thread thread_;
};

/// The worker side: connects to `address` (handover::address()), sends `ticket` and
/// returns the descriptors the node handed over (the caller owns them), in the order
/// offered. Throws std::runtime_error saying why (refused, timed out, not a node).
std::vector<int> collect_handover(const std::string& address, const std::string& ticket,
                                  std::chrono::milliseconds timeout);

} // namespace rw::transports::shm
