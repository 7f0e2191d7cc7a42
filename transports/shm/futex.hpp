#pragma once
// Cross-process futex wait and wake for shm::doorbell (included by layout.hpp).

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace rw::transports::shm {

inline void ring(doorbell& bell) noexcept {
  bell.seq.fetch_add(1, std::memory_order_acq_rel);
  if (bell.sleeping.load(std::memory_order_acquire) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAKE, 1, nullptr,
            nullptr, 0);
}

template <class Ready>
void wait(doorbell& bell, int timeout_ms, Ready ready) {
  auto seen = bell.seq.load(std::memory_order_acquire);
  bell.sleeping.store(1, std::memory_order_seq_cst);
  if (!ready()) {
    timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell.seq), FUTEX_WAIT, seen, &ts,
            nullptr, 0);
  }
  bell.sleeping.store(0, std::memory_order_release);
}

} // namespace rw::transports::shm
