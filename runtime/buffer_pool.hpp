#pragma once
// Pre-allocated, reused, cache-line aligned buffers for received chunks, carved out of
// slabs allocated on one NUMA domain (the receiving poller's).
//
// A NIC poller takes a buffer from the pool, receives a chunk payload straight into it
// and hands the shard a `buffer_ref` (a reference count, never a copy). When the last
// reference goes, the buffer returns to the pool's free list. The pool only grows (to
// the protocol's natural bound: what is held while a step waits for its slowest
// worker) while it is used, never frees a buffer that is still referenced, even after
// the pool itself is gone, and gives its memory back when told to (trim) once none of
// its buffers is out: a poller does so when it has no job left.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/payload.hpp"

namespace rw::runtime {

namespace detail {
struct pool_core;
}

class pooled_buffer final : public payload {
private:
  friend struct detail::pool_core;
  friend class buffer_pool;
  pooled_buffer(std::shared_ptr<detail::pool_core> owner, std::byte* data,
                size_t capacity)
    : payload(data, capacity, true), owner_(std::move(owner)) {}
  ~pooled_buffer() override = default; // the memory belongs to the pool's slab
  void recycle() noexcept override;

  std::shared_ptr<detail::pool_core> owner_;
};

class buffer_pool {
public:
  /// A pool of buffers of `buffer_bytes` each, `prealloc` of them allocated up front,
  /// all on NUMA domain `numa`.
  buffer_pool(size_t buffer_bytes, size_t prealloc, uint32_t numa = 0);
  ~buffer_pool();

  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// A free buffer, allocating a new one when none is free.
  buffer_ref acquire();

  /// When every buffer is free and more than `keep` were allocated: frees all of the
  /// pool's slabs (back to the system) and allocates `keep` buffers afresh. Returns the
  /// bytes given back (0: nothing done, a buffer is still out or the pool is small).
  size_t trim(size_t keep);

  size_t buffer_bytes() const noexcept;
  size_t allocated() const noexcept; // buffers ever allocated
  size_t free_count() const noexcept;

private:
  std::shared_ptr<detail::pool_core> core_;
};

} // namespace rw::runtime
