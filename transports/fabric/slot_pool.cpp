#include "transports/fabric/slot_pool.hpp"

#include <rdma/fabric.h>

#include <algorithm>

#include <fmt/format.h>

#include "rackweave/errc.hpp"

namespace rw::transports::fabric {

namespace {
constexpr uint64_t alignment = 64;
constexpr uint64_t mib = 1ull << 20;
} // namespace

slot_pool::window::window(std::shared_ptr<slot_pool> pool, uint64_t offset,
                          uint64_t bytes)
  : pool_(std::move(pool)), offset_(offset), bytes_(bytes),
    data_(pool_->memory_.data() + offset) {
  try {
    region_ = std::make_unique<region>(*pool_->domain_, data_, bytes_,
                                       FI_REMOTE_WRITE | FI_RECV);
  } catch (...) {
    pool_->give_back(offset_, bytes_); // the destructor does not run
    throw;
  }
}

slot_pool::window::~window() {
  pool_->give_back(offset_, bytes_);
}

std::shared_ptr<slot_pool> slot_pool::make(std::shared_ptr<domain> d, uint64_t bytes,
                                           uint32_t numa, bool shared) {
  return std::shared_ptr<slot_pool>(new slot_pool(std::move(d), bytes, numa, shared));
}

slot_pool::slot_pool(std::shared_ptr<domain> d, uint64_t bytes, uint32_t numa,
                     bool shared)
  : domain_(std::move(d)), memory_((bytes + alignment - 1) / alignment * alignment, numa),
    shared_(shared) {
  // Registered once now and let go: a locked-memory limit too low for the pool is said
  // when the endpoint is made, not at a worker's connect. Windows register their own.
  region whole(*domain_, memory_.data(), memory_.size(), FI_REMOTE_WRITE | FI_RECV);
  free_[0] = memory_.size();
}

uint64_t slot_pool::lent() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return lent_;
}

std::unique_ptr<slot_pool::window> slot_pool::lend(uint64_t unit, uint32_t min_units,
                                                   uint32_t want_units) {
  auto [offset, bytes] = carve(unit, min_units, want_units);
  // Registered outside the lock (it may take a while on providers that pin pages).
  return std::unique_ptr<window>(new window(shared_from_this(), offset, bytes));
}

std::pair<uint64_t, uint64_t> slot_pool::carve(uint64_t unit, uint32_t min_units,
                                               uint32_t want_units) {
  unit = (unit + alignment - 1) / alignment * alignment;
  min_units = std::max<uint32_t>(1, std::min(min_units, want_units));
  std::lock_guard<std::mutex> guard{mtx_};
  uint64_t free_bytes = 0;
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    free_bytes += it->second;
    if (best == free_.end() || it->second > best->second)
      best = it;
  }
  auto largest = best == free_.end() ? 0 : best->second;
  auto share = shared_ ? free_bytes / 2 : free_bytes;
  auto units = std::min<uint64_t>({want_units, share / unit, largest / unit});
  if (units < min_units) {
    if (largest / unit < min_units)
      throw rw::error(
        errc::unavailable,
        fmt::format(
          "fabric: the receive pool has no room for another peer: it needs {} "
          "slots of {} bytes ({:.1f} MiB), the pool's largest free part is {:.1f} "
          "MiB ({:.1f} of {:.1f} MiB lent to connections); raise --fabric-pool "
          "(node.fabric_pool_mib) or lower the job's chunk size",
          min_units, unit, double(min_units * unit) / mib, double(largest) / mib,
          double(lent_) / mib, double(memory_.size()) / mib));
    units = min_units; // the last room: smaller than half of it, still fits
  }
  auto offset = best->first;
  auto bytes = units * unit;
  auto rest = best->second - bytes;
  free_.erase(best);
  if (rest > 0)
    free_[offset + bytes] = rest;
  lent_ += bytes;
  return {offset, bytes};
}

void slot_pool::give_back(uint64_t offset, uint64_t bytes) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  lent_ -= bytes;
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

} // namespace rw::transports::fabric
