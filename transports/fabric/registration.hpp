#pragma once
// Memory registered with a fabric domain, and the cache that registers each range once.
//
// A `region` is one registration: its descriptor (for local buffers, where the provider
// asks for one), its key and the address peers write to. The cache is keyed by address
// range: a buffer inside a registered range reuses it, so a worker's tensors and a
// node's parameter arenas are registered the first time a chunk of them travels and
// never again (no registration per message). Regions are reference counted: one in use
// by a send in flight is never deregistered; unused ones are dropped oldest first once
// the cache holds more than its bound.
//
// Limit: the cache cannot see memory being freed. A buffer freed and its address reused
// for other memory would keep the old registration; on providers that pin pages
// (verbs, efa) keep tensors alive for the worker's lifetime (training loops do).

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "transports/fabric/domain.hpp"

struct fid_mr;

namespace rw::transports::fabric {

class region {
public:
  /// Registers [data, data + bytes) for `access` (FI_SEND, FI_WRITE, FI_REMOTE_WRITE...).
  /// Throws rw::error(errc::io_error) naming the locked-memory limit (ulimit -l) and
  /// how much was asked when the provider refuses.
  region(domain& d, const void* data, size_t bytes, uint64_t access);
  ~region();
  region(const region&) = delete;
  region& operator=(const region&) = delete;

  void* desc() const noexcept { return desc_; }
  uint64_t key() const noexcept { return key_; }
  /// The address a peer names for `p` (inside this region) in an RMA operation.
  uint64_t remote_address(const void* p) const noexcept;
  const std::byte* begin() const noexcept { return begin_; }
  const std::byte* end() const noexcept { return begin_ + bytes_; }
  bool contains(const void* p, size_t n) const noexcept {
    auto* b = static_cast<const std::byte*>(p);
    return b >= begin_ && b + n <= end();
  }

private:
  fid_mr* mr_ = nullptr;
  void* desc_ = nullptr;
  uint64_t key_ = 0;
  const std::byte* begin_;
  size_t bytes_;
  bool virt_addr_;
};

class registration_cache : public std::enable_shared_from_this<registration_cache> {
public:
  /// Keeps at most `max_regions` unused registrations (in-use ones are never dropped).
  /// A miss registers the `span`-aligned range around the buffer (its pages if the
  /// provider refuses that); memory peers may write is registered by pages (`span`
  /// 4096), so nothing beside the buffer is exposed.
  registration_cache(std::shared_ptr<domain> d, uint64_t access,
                     size_t max_regions = 4096, uintptr_t span = 1u << 20);

  /// The registration covering [p, p + n), made now if none does. Thread-safe.
  std::shared_ptr<region> get(const void* p, size_t n);

  /// Registers [p, p + n) (its pages) now, for as long as the returned handle lives:
  /// sends from it find this registration, and when the handle goes the cache forgets
  /// it (the memory may then be freed and its addresses reused: no stale registration
  /// stays behind). Unused registrations overlapping it are dropped first. A node
  /// pins a job's parameter arena when the job is created. Thread-safe.
  std::shared_ptr<void> pin(const void* p, size_t n);

  /// Registrations made so far (a steady state makes none).
  uint64_t registrations() const noexcept { return made_; }

private:
  // By range (start, end): registrations may overlap, and two may start at the same
  // page (a send's span beside a pinned arena) without one hiding the other.
  using range = std::pair<const std::byte*, const std::byte*>;

  void trim();
  void forget(range key, const region* r) noexcept;
  void insert(range key, std::shared_ptr<region> r); // under mtx_

  std::shared_ptr<domain> domain_;
  uint64_t access_;
  size_t max_regions_;
  uintptr_t span_;
  mutable std::mutex mtx_;
  std::map<range, std::shared_ptr<region>> by_range_;
  std::list<range> age_; // oldest registration first
  uint64_t made_ = 0;
  size_t longest_ =
    0; // bytes of the longest registration made: how far back a lookup looks
};

} // namespace rw::transports::fabric
