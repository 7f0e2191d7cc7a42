#include "transports/tcp/send_queue.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rw::transports::tcp {

namespace {
// Pieces are packed into blocks of at least this size, so many small frames (acks,
// headers) cost one allocation and one iovec each block, not each frame.
constexpr size_t block_bytes = 256 * 1024;
constexpr int max_iov = 64; // blocks per write
} // namespace

void send_queue::append(const iovec* iov, int n) {
  for (int i = 0; i < n; ++i) {
    auto* src = static_cast<const std::byte*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      if (blocks_.empty() || blocks_.back().size == blocks_.back().capacity) {
        block b;
        b.capacity = std::max(block_bytes, left);
        b.data.reset(new std::byte[b.capacity]);
        blocks_.push_back(std::move(b));
      }
      auto& b = blocks_.back();
      size_t take = std::min(left, b.capacity - b.size);
      std::memcpy(b.data.get() + b.size, src, take);
      b.size += take;
      src += take;
      left -= take;
      bytes_ += take;
    }
  }
}

ssize_t send_queue::drain(int fd) {
  ssize_t total = 0;
  while (bytes_ > 0) {
    iovec iov[max_iov];
    int count = 0;
    for (auto it = blocks_.begin(); it != blocks_.end() && count < max_iov;
         ++it, ++count) {
      size_t skip = count == 0 ? head_offset_ : 0;
      iov[count] = {it->data.get() + skip, it->size - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return total;
      return -1;
    }
    total += sent;
    bytes_ -= static_cast<size_t>(sent);
    auto rest = static_cast<size_t>(sent);
    while (rest > 0) {
      auto& front = blocks_.front();
      size_t in_front = front.size - head_offset_;
      if (rest < in_front) {
        head_offset_ += rest;
        break;
      }
      rest -= in_front;
      blocks_.pop_front();
      head_offset_ = 0;
    }
  }
  return total;
}

void send_queue::clear() noexcept {
  blocks_.clear();
  head_offset_ = 0;
  bytes_ = 0;
}

} // namespace rw::transports::tcp
