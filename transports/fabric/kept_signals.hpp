#pragma once
// The process's signal handlers, kept across calls into libfabric. A provider's
// library may install its own in a constructor when libfabric loads it: libpsm2 (the
// psm2 provider, Debian's libfabric1 loads it on every machine) takes SIGSEGV, SIGBUS,
// SIGILL, SIGABRT, SIGINT and SIGTERM, writes a backtrace file into the working
// directory and calls exit(1) from the handler. In a training process that embeds a
// worker, Ctrl-C and the launcher's SIGTERM would no longer reach the program's own
// handling; in rw-node a fault would end with status 1 instead of its crash report
// (apps/tools/crash_report.hpp) and the signal's status. Each call into libfabric that
// may load a provider (the dlopen, fi_getinfo, fi_fabric, fi_domain) runs inside a
// kept_signals, which puts back every handler that the call changed.

#include <csignal>
#include <cstddef>

namespace rw::transports::fabric {

class kept_signals {
public:
  kept_signals() noexcept;
  ~kept_signals();
  kept_signals(const kept_signals&) = delete;
  kept_signals& operator=(const kept_signals&) = delete;

  /// The signals kept: the faults and the requests to stop, as libpsm2 takes them. Not
  /// SIGPIPE: a provider that ignores it may count on that for its sockets.
  static constexpr int watched[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE,
                                    SIGABRT, SIGINT, SIGTERM};
  static constexpr std::size_t count = sizeof(watched) / sizeof(watched[0]);

  /// How many handlers calls into libfabric changed and this process put back, since
  /// it started (a provider's library installs them once, when it loads).
  static unsigned restored() noexcept;

private:
  struct sigaction saved_[count];
  bool have_[count];
};

} // namespace rw::transports::fabric
