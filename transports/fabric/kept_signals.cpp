// The process's signal handlers, kept across calls into libfabric (kept_signals.hpp).

#include "transports/fabric/kept_signals.hpp"

#include <atomic>

namespace rw::transports::fabric {

namespace {

std::atomic<unsigned> restored_count{0};

// Whether two dispositions differ in what runs (the handler or the action) or how.
bool differ(const struct sigaction& a, const struct sigaction& b) {
  if (a.sa_flags != b.sa_flags)
    return true;
  if (a.sa_flags & SA_SIGINFO)
    return a.sa_sigaction != b.sa_sigaction;
  return a.sa_handler != b.sa_handler;
}

} // namespace

kept_signals::kept_signals() noexcept {
  for (std::size_t i = 0; i < count; ++i)
    have_[i] = ::sigaction(watched[i], nullptr, &saved_[i]) == 0;
}

kept_signals::~kept_signals() {
  for (std::size_t i = 0; i < count; ++i) {
    struct sigaction now {};
    if (!have_[i] || ::sigaction(watched[i], nullptr, &now) != 0
        || !differ(now, saved_[i]))
      continue;
    if (::sigaction(watched[i], &saved_[i], nullptr) == 0)
      restored_count.fetch_add(1, std::memory_order_relaxed);
  }
}

unsigned kept_signals::restored() noexcept {
  return restored_count.load(std::memory_order_relaxed);
}

} // namespace rw::transports::fabric
