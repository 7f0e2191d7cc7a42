#pragma once
// An endpoint's epoll set, shared with its connections: a connection whose send queue
// fills (on a shard's thread) asks here to be told when its socket is writable again,
// and the endpoint's thread then drains it. Shared ownership keeps the epoll
// descriptor open while any connection may still ask, so a closed endpoint's number
// is never reused under it. epoll_ctl is safe from any thread.

#include <sys/epoll.h>

#include <mutex>
#include <vector>

namespace rw::transports::tcp {

class poll_set {
public:
  /// Throws std::runtime_error if the kernel refuses an epoll instance.
  poll_set();
  ~poll_set();

  poll_set(const poll_set&) = delete;
  poll_set& operator=(const poll_set&) = delete;

  /// Watches `fd` for reading (a connection's data and hang-up, or a listener's
  /// accepts: `listener`).
  void add(int fd, bool listener = false);
  /// What wakes the endpoint for `fd`: its data and the peer's close (`readable`; off
  /// while its reading is paused) and room for more bytes (`writable`). A hang-up or
  /// an error always does.
  void watch(int fd, bool readable, bool writable);
  /// Makes the endpoint look at `fd` on its next poll as if readable (a connection
  /// whose reading resumed may hold a whole frame read already, which no event
  /// announces).
  void kick(int fd);
  /// The descriptors kicked since the last call.
  std::vector<int> take_kicked();
  void remove(int fd);

  /// epoll_wait on the set.
  int wait(epoll_event* events, int max, int timeout_ms);

private:
  int fd_;
  std::mutex kick_mtx_;
  std::vector<int> kicked_;
};

} // namespace rw::transports::tcp
