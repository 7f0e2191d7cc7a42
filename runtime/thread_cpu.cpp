#include "runtime/thread_cpu.hpp"

#include <pthread.h>
#include <system_error>
#include <time.h>

namespace rw::runtime {

namespace {

constexpr uint32_t no_clock = 0xffffffffu;

uint64_t pack(uint32_t generation, clockid_t clock) {
  return (uint64_t{generation} << 32) | static_cast<uint32_t>(clock);
}

std::optional<uint64_t> read_clock(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) // EINVAL once the thread has ended
    return std::nullopt;
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull
         + static_cast<uint64_t>(ts.tv_nsec);
}

} // namespace

uint64_t thread_cpu_slot::empty(uint32_t generation) {
  return (uint64_t{generation} << 32) | no_clock;
}

uint32_t thread_cpu_slot::publish_this_thread() {
  clockid_t clock{};
  if (int rc = pthread_getcpuclockid(pthread_self(), &clock); rc != 0)
    throw std::system_error(rc, std::generic_category(), "pthread_getcpuclockid");
  auto old = packed_.load(std::memory_order_relaxed);
  uint32_t generation = 0;
  do
    generation = static_cast<uint32_t>(old >> 32) + 1;
  while (!packed_.compare_exchange_weak(old, pack(generation, clock),
                                        std::memory_order_acq_rel));
  return generation;
}

void thread_cpu_slot::withdraw(uint32_t token) {
  auto old = packed_.load(std::memory_order_relaxed);
  while (
    static_cast<uint32_t>(old >> 32) == token && static_cast<uint32_t>(old) != no_clock
    && !packed_.compare_exchange_weak(old, empty(token), std::memory_order_acq_rel)) {
  }
}

std::optional<uint64_t> thread_cpu_slot::read_ns() const {
  auto packed = packed_.load(std::memory_order_acquire);
  auto clock = static_cast<uint32_t>(packed);
  if (clock == no_clock)
    return std::nullopt;
  return read_clock(static_cast<clockid_t>(static_cast<int32_t>(clock)));
}

uint64_t this_thread_cpu_ns() {
  return read_clock(CLOCK_THREAD_CPUTIME_ID).value_or(0);
}

void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); // best effort
}

} // namespace rw::runtime
