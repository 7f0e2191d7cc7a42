#include "runtime/buffer_pool.hpp"

#include <cstdlib>
#include <new>

#include "rackweave/defaults.hpp"

namespace rw::runtime {

namespace detail {

struct pool_core : std::enable_shared_from_this<pool_core> {
  explicit pool_core(size_t bytes) : buffer_bytes(bytes) {
  }

  size_t buffer_bytes;
  mutable std::mutex mtx;
  std::vector<pooled_buffer*> free_list;
  size_t allocated = 0;
  bool closed = false;

  pooled_buffer* make() {
    auto rounded = (buffer_bytes + defaults::cache_line - 1) / defaults::cache_line
                   * defaults::cache_line;
    auto* mem = static_cast<std::byte*>(std::aligned_alloc(defaults::cache_line, rounded));
    if (mem == nullptr)
      throw std::bad_alloc();
    return new pooled_buffer(shared_from_this(), mem, buffer_bytes);
  }

  // Called with the last reference gone; returns true if the pool kept the buffer.
  bool take_back(pooled_buffer* p) {
    std::lock_guard<std::mutex> guard{mtx};
    if (closed)
      return false;
    free_list.push_back(p);
    return true;
  }
};

} // namespace detail

pooled_buffer::~pooled_buffer() {
  std::free(data_);
}

void intrusive_ptr_release(pooled_buffer* p) noexcept {
  if (p->refs_.fetch_sub(1, std::memory_order_acq_rel) != 1)
    return;
  p->size = 0;
  auto owner = p->owner_; // keep the core alive while we hand the buffer back
  if (!owner->take_back(p))
    delete p;
}

buffer_pool::buffer_pool(size_t buffer_bytes, size_t prealloc)
  : core_(std::make_shared<detail::pool_core>(buffer_bytes)) {
  std::vector<pooled_buffer*> fresh;
  fresh.reserve(prealloc);
  for (size_t i = 0; i < prealloc; ++i)
    fresh.push_back(core_->make());
  std::lock_guard<std::mutex> guard{core_->mtx};
  core_->free_list = std::move(fresh);
  core_->allocated = prealloc;
}

buffer_pool::~buffer_pool() {
  std::vector<pooled_buffer*> to_free;
  {
    std::lock_guard<std::mutex> guard{core_->mtx};
    core_->closed = true;
    to_free.swap(core_->free_list);
  }
  for (auto* p : to_free)
    delete p;
}

buffer_ref buffer_pool::acquire() {
  pooled_buffer* p = nullptr;
  {
    std::lock_guard<std::mutex> guard{core_->mtx};
    if (!core_->free_list.empty()) {
      p = core_->free_list.back();
      core_->free_list.pop_back();
    } else {
      ++core_->allocated;
    }
  }
  if (p == nullptr)
    p = core_->make();
  return buffer_ref{p}; // add_ref: 0 -> 1
}

size_t buffer_pool::buffer_bytes() const noexcept {
  return core_->buffer_bytes;
}

size_t buffer_pool::allocated() const noexcept {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->allocated;
}

size_t buffer_pool::free_count() const noexcept {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->free_list.size();
}

} // namespace rw::runtime
