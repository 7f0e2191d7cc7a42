#pragma once
// The bytes of a connection's frames that its socket did not take at once, owned (a
// copy: the caller's memory is free when send returns), in order. The copy is made
// only when a peer reads slower than the node writes; a peer that keeps up costs none.
// Not thread-safe: the connection guards it with its send mutex.

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <deque>
#include <memory>

namespace rw::transports::tcp {

class send_queue {
public:
  bool empty() const noexcept { return bytes_ == 0; }
  size_t bytes() const noexcept { return bytes_; }

  /// Copies the `n` pieces behind what is queued.
  void append(const iovec* iov, int n);

  /// Writes to `fd` (non-blocking) as much as its socket takes. Returns the bytes
  /// written (0: it took nothing now), or -1 with errno set on a failed write.
  ssize_t drain(int fd);

  /// Drops everything queued.
  void clear() noexcept;

private:
  struct block {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0; // bytes filled
    size_t capacity = 0;
  };

  std::deque<block> blocks_;
  size_t head_offset_ = 0; // bytes of blocks_.front() already written
  size_t bytes_ = 0;
};

} // namespace rw::transports::tcp
