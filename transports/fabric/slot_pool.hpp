#pragma once
// The receive pool of a fabric endpoint: one NUMA-local block, allocated (and touched)
// when the endpoint is made, lent to connections as windows of receive slots. Each
// window is registered for remote writes on its own, under its own key (random where
// the application picks keys): a peer holds only its window's key, so its writes land
// in its window or nowhere, never in another connection's slots (issue 59: one key for
// the whole pool let one job's worker write into another's). A pool with no room left
// for a connection's smallest window refuses it with what to raise (--fabric-pool).
//
// A connection takes at most half of what is free (and at most its cap), so a pool
// serves many peers: later ones get fewer slots (credits), none is refused while the
// smallest window fits.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/topology.hpp"
#include "transports/fabric/registration.hpp"

namespace rw::transports::fabric {

class slot_pool : public std::enable_shared_from_this<slot_pool> {
public:
  /// A part of the pool lent to one connection; given back when destroyed.
  class window {
  public:
    ~window();
    window(const window&) = delete;
    window& operator=(const window&) = delete;

    std::byte* data() const noexcept { return data_; }
    uint64_t size() const noexcept { return bytes_; }
    /// This window's own registration (its key, the addresses its peer writes to).
    const region& registration() const noexcept { return *region_; }

  private:
    friend class slot_pool;
    window(std::shared_ptr<slot_pool> pool, uint64_t offset, uint64_t bytes);
    std::shared_ptr<slot_pool> pool_;
    uint64_t offset_;
    uint64_t bytes_;
    std::byte* data_;
    std::unique_ptr<region> region_;
  };

  /// Allocates `bytes` on NUMA domain `numa` (each window lent is registered for
  /// FI_REMOTE_WRITE when lent).
  /// A `shared` pool lends each connection at most half of what is free; one that is
  /// not (a worker's, sized for its one connection) lends all of it.
  /// Throws rw::error as region does (the message names ulimit -l).
  static std::shared_ptr<slot_pool> make(std::shared_ptr<domain> d, uint64_t bytes,
                                         uint32_t numa, bool shared);

  /// A window of `unit`-sized slots: as many as `want_units` (at most half of what is
  /// free in a shared pool), never fewer than `min_units`, registered under a key of its
  /// own. Thread-safe. Throws rw::error(errc::unavailable) when even `min_units` do not
  /// fit, rw::error(errc::io_error) as region does when it cannot be registered.
  std::unique_ptr<window> lend(uint64_t unit, uint32_t min_units, uint32_t want_units);

  uint64_t capacity() const noexcept { return memory_.size(); }
  /// Bytes lent out now.
  uint64_t lent() const;

private:
  slot_pool(std::shared_ptr<domain> d, uint64_t bytes, uint32_t numa, bool shared);
  /// Takes a window's range (offset, bytes) out of the free list (lend's rules).
  std::pair<uint64_t, uint64_t> carve(uint64_t unit, uint32_t min_units,
                                      uint32_t want_units);
  void give_back(uint64_t offset, uint64_t bytes) noexcept;

  std::shared_ptr<domain> domain_; // outlives the registration
  runtime::numa_region memory_;
  bool shared_;
  mutable std::mutex mtx_;
  std::map<uint64_t, uint64_t> free_; // offset -> bytes, coalesced
  uint64_t lent_ = 0;
};

} // namespace rw::transports::fabric
