#pragma once
// The slots a fabric connection owes its peer (transports/fabric/connection.hpp): a
// slot given back is owed, and the owed slots are due together once there are
// batch_at() of them, or as soon as nothing holds them back any more: no frame of the
// peer's still held here, and no round of the endpoint's thread that may give more
// back at once. So a credit is never withheld for longer than some other frame of the
// same peer is held, and at most batch_at() - 1 slots are ever owed.
//
// Thread-safe: holds rise on the endpoint's thread (a frame delivered, a round begun),
// slots come back on any thread (whoever drops the frame's last reference).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "transports/fabric/core.hpp"

namespace rw::transports::fabric {

class owed_credits {
public:
  /// Slots due in one credit message (n == 0: none due).
  struct batch {
    std::array<uint16_t, credit_batch_accepted> slots{};
    size_t n = 0;
  };

  /// Owed slots that are due at once: 1 to credit_batch_accepted (clamped).
  void set_batch_at(uint32_t at) noexcept;
  uint32_t batch_at() const noexcept { return at_; }

  /// Something holds owed slots back: a frame of the peer's delivered and held here,
  /// or a round of the endpoint's thread.
  void hold() noexcept;
  /// A held frame's slot is given back, ending its hold: what is due now.
  batch release(uint16_t slot) noexcept;
  /// A hold without a slot (the endpoint's round) ends: what is due now.
  batch unhold() noexcept;

private:
  batch take() noexcept; // under mtx_

  std::mutex mtx_;
  std::array<uint16_t, credit_batch_accepted> owed_{};
  size_t count_ = 0; // under mtx_, always below at_
  // Rises without the lock and falls under it, so the fall to 0 sees every slot owed
  // before it.
  std::atomic<uint32_t> holds_{0};
  uint32_t at_ = 1;
};

} // namespace rw::transports::fabric
