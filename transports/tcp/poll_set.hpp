#pragma once
// An endpoint's epoll set, shared with its connections: a connection whose send queue
// fills (on a shard's thread) asks here to be told when its socket is writable again,
// and the endpoint's thread then drains it. Shared ownership keeps the epoll
// descriptor open while any connection may still ask, so a closed endpoint's number
// is never reused under it. epoll_ctl is safe from any thread.

#include <sys/epoll.h>

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
  /// Also wakes the endpoint when `fd` can take more bytes (on), or no longer (off).
  void watch_writable(int fd, bool on);
  void remove(int fd);

  /// epoll_wait on the set.
  int wait(epoll_event* events, int max, int timeout_ms);

private:
  int fd_;
};

} // namespace rw::transports::tcp
