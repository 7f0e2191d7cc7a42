#include "transports/fabric/owed_credits.hpp"

#include <algorithm>

namespace rw::transports::fabric {

void owed_credits::set_batch_at(uint32_t at) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  at_ = std::clamp<uint32_t>(at, 1, credit_batch_accepted);
}

void owed_credits::hold() noexcept {
  holds_.fetch_add(1);
}

owed_credits::batch owed_credits::release(uint16_t slot) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  owed_[count_++] = slot;
  auto left = holds_.fetch_sub(1) - 1;
  return count_ >= at_ || left == 0 ? take() : batch{};
}

owed_credits::batch owed_credits::unhold() noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  return holds_.fetch_sub(1) == 1 && count_ > 0 ? take() : batch{};
}

owed_credits::batch owed_credits::take() noexcept {
  batch b;
  std::copy(owed_.begin(), owed_.begin() + static_cast<long>(count_), b.slots.begin());
  b.n = count_;
  count_ = 0;
  return b;
}

} // namespace rw::transports::fabric
