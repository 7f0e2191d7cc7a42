#pragma once
// A chunk payload held by reference on its way from a transport to a shard: a pooled
// receive buffer (runtime/buffer_pool.hpp), or a read-only view of memory a worker
// process shares with the node (transports/shm). Never copied: whoever holds a
// `buffer_ref` holds the memory; the last release calls recycle(), which returns the
// buffer to its pool or tells the worker its memory is free again.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <caf/intrusive_ptr.hpp>

namespace rw::runtime {

class payload {
public:
  float* floats() noexcept { return reinterpret_cast<float*>(data_); }
  const float* floats() const noexcept { return reinterpret_cast<const float*>(data_); }
  std::byte* bytes() noexcept { return data_; }
  size_t capacity() const noexcept { return capacity_; }
  /// False for views of memory the receiver may only read.
  bool writable() const noexcept { return writable_; }
  /// Bytes of payload currently held (set by the receiver).
  size_t size = 0;

  /// Counts `bytes` against `account` until the last reference to this payload goes
  /// (what one peer's frames hold at the shards: a poller's backpressure). Set by the
  /// receiver before it hands the payload on.
  void charge(std::shared_ptr<std::atomic<int64_t>> account, int64_t bytes) noexcept {
    account->fetch_add(bytes, std::memory_order_relaxed);
    account_ = std::move(account);
    charged_ = bytes;
  }

  friend void intrusive_ptr_add_ref(payload* p) noexcept {
    p->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  friend void intrusive_ptr_release(payload* p) noexcept {
    if (p->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (p->account_) {
        p->account_->fetch_sub(p->charged_, std::memory_order_relaxed);
        p->account_.reset();
      }
      p->recycle();
    }
  }

protected:
  payload(std::byte* data, size_t capacity, bool writable) noexcept
    : data_(data), capacity_(capacity), writable_(writable) {}
  virtual ~payload() = default;
  /// The last reference is gone: reuse or delete `this`.
  virtual void recycle() noexcept = 0;

private:
  std::byte* data_;
  size_t capacity_;
  bool writable_;
  std::atomic<uint32_t> refs_{0};
  std::shared_ptr<std::atomic<int64_t>> account_; // charge(): released with the payload
  int64_t charged_ = 0;
};

using buffer_ref = caf::intrusive_ptr<payload>;

} // namespace rw::runtime
