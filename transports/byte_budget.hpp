#pragma once
// Bytes that several endpoints (threads) draw from one node-wide limit: what the node
// holds for peers that have not joined a job (their gathered hello, attach and proof
// payloads). A peer that has proven nothing can then make the node hold at most this
// much, however many connections it opens.

#include <atomic>
#include <cstdint>

namespace rw::transports {

class byte_budget {
public:
  explicit byte_budget(uint64_t limit) : limit_(limit) {}

  byte_budget(const byte_budget&) = delete;
  byte_budget& operator=(const byte_budget&) = delete;

  /// Takes `n` bytes if the total stays within the limit; false (nothing taken) if not.
  bool take(uint64_t n) noexcept {
    auto now = held_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ || now > limit_ - n)
        return false;
    } while (!held_.compare_exchange_weak(now, now + n, std::memory_order_relaxed));
    return true;
  }

  /// Gives back `n` bytes taken before.
  void give(uint64_t n) noexcept { held_.fetch_sub(n, std::memory_order_relaxed); }

  uint64_t held() const noexcept { return held_.load(std::memory_order_relaxed); }
  uint64_t limit() const noexcept { return limit_; }

private:
  const uint64_t limit_;
  std::atomic<uint64_t> held_{0};
};

} // namespace rw::transports
