#include "runtime/buffer_pool.hpp"

#include <algorithm>

#include "rackweave/defaults.hpp"
#include "runtime/topology.hpp"

namespace rw::runtime {

namespace detail {

constexpr size_t slab_bytes = 2 * 1024 * 1024;

struct pool_core : std::enable_shared_from_this<pool_core> {
  pool_core(size_t bytes, uint32_t numa)
    : buffer_bytes(bytes), stride((bytes + defaults::cache_line - 1)
                                  / defaults::cache_line * defaults::cache_line),
      numa(numa) {}

  size_t buffer_bytes;
  size_t stride; // buffer size rounded up to whole cache lines
  uint32_t numa;
  mutable std::mutex mtx;
  std::vector<pooled_buffer*> free_list;
  std::vector<runtime::numa_region> slabs; // live as long as any buffer of the pool
  size_t slab_used = 0;                    // bytes handed out of slabs.back()
  size_t allocated = 0;
  bool closed = false;

  // Called with mtx held: the next buffer out of the current slab, or a new slab.
  pooled_buffer* make() {
    if (slabs.empty() || slab_used + stride > slabs.back().size()) {
      slabs.emplace_back(std::max(slab_bytes, stride), numa);
      slab_used = 0;
    }
    auto* mem = slabs.back().data() + slab_used;
    slab_used += stride;
    ++allocated;
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

void pooled_buffer::recycle() noexcept {
  size = 0;
  auto owner = owner_; // keep the core alive while we hand the buffer back
  if (!owner->take_back(this))
    delete this;
}

buffer_pool::buffer_pool(size_t buffer_bytes, size_t prealloc, uint32_t numa)
  : core_(std::make_shared<detail::pool_core>(buffer_bytes, numa)) {
  std::lock_guard<std::mutex> guard{core_->mtx};
  for (size_t i = 0; i < prealloc; ++i)
    core_->free_list.push_back(core_->make());
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
  std::lock_guard<std::mutex> guard{core_->mtx};
  if (core_->free_list.empty())
    return buffer_ref{core_->make()}; // add_ref: 0 -> 1
  auto* p = core_->free_list.back();
  core_->free_list.pop_back();
  return buffer_ref{p};
}

size_t buffer_pool::buffer_bytes() const noexcept {
  return core_->buffer_bytes;
}

size_t buffer_pool::allocated() const noexcept {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->allocated;
}

size_t buffer_pool::trim(size_t keep) {
  std::vector<pooled_buffer*> to_free;
  size_t before = 0;
  size_t after = 0;
  {
    std::lock_guard<std::mutex> guard{core_->mtx};
    auto& c = *core_;
    if (c.allocated <= keep || c.free_list.size() != c.allocated)
      return 0; // small already, or a buffer is still out: its slab stays
    for (auto& slab : c.slabs)
      before += slab.size();
    to_free.swap(c.free_list);
    c.slabs.clear(); // every buffer of them is in to_free, none referenced
    c.slab_used = 0;
    c.allocated = 0;
    for (size_t i = 0; i < keep; ++i)
      c.free_list.push_back(c.make());
    for (auto& slab : c.slabs)
      after += slab.size();
  }
  for (auto* p : to_free)
    delete p; // the objects only: their memory was the slabs'
  return before - after;
}

size_t buffer_pool::free_count() const noexcept {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->free_list.size();
}

} // namespace rw::runtime
