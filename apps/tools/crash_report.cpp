#include "apps/tools/crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace rw::tools {
namespace {

const char* program_name = "rackweave";
std::atomic<bool> reporting{false};
constexpr int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
alignas(16) char alternate_stack[64 * 1024]; // the main thread's, for a stack overflow

// A fixed buffer written with write(2): no allocation, no locale, no stdio.
struct line {
  char text[256];
  size_t size = 0;
  void add(const char* s) {
    while (*s != '\0' && size < sizeof(text))
      text[size++] = *s++;
  }
  void add_decimal(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0 && size < sizeof(text))
      text[size++] = digits[--n];
  }
  void add_hex(uint64_t v) {
    add("0x");
    char digits[16];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 0xf];
      v >>= 4;
    } while (v != 0);
    while (n > 0 && size < sizeof(text))
      text[size++] = digits[--n];
  }
  void write_to(int fd) const {
    size_t done = 0;
    while (done < size) {
      auto n = ::write(fd, text + done, size - done);
      if (n <= 0)
        return;
      done += static_cast<size_t>(n);
    }
  }
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  // One report: a second thread faulting meanwhile waits for the first to end the
  // process (the default action below), rather than interleaving its lines.
  if (reporting.exchange(true)) {
    for (;;)
      ::pause();
  }
  line head;
  head.add(program_name);
  head.add(": fatal signal ");
  head.add(signal_name(sig));
  if (sig != SIGABRT) {
    head.add(" (address ");
    head.add_hex(reinterpret_cast<uintptr_t>(info->si_addr));
    head.add(")");
  }
  head.add(" in thread ");
  head.add_decimal(static_cast<uint64_t>(::syscall(SYS_gettid)));
  char thread_name[17] = {};
  if (::prctl(PR_GET_NAME, thread_name) == 0 && thread_name[0] != '\0') {
    head.add(" (");
    head.add(thread_name);
    head.add(")");
  }
  head.add("; backtrace:\n");
  head.write_to(STDERR_FILENO);
  void* frames[64];
  int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // The default action, once this handler returns and unblocks the signal.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

} // namespace

void install_crash_report(const char* program) {
  if constexpr (crash_report_enabled) {
    program_name = program;
    // backtrace(3) loads libgcc_s on its first call, which allocates: not in a handler.
    void* warm[1];
    (void)::backtrace(warm, 1);
    stack_t stack{};
    stack.ss_sp = alternate_stack;
    stack.ss_size = sizeof(alternate_stack);
    ::sigaltstack(&stack, nullptr);
    struct sigaction action {};
    action.sa_sigaction = on_fatal_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int sig : fatal_signals)
      ::sigaction(sig, &action, nullptr);
  } else {
    (void)program;
  }
}

} // namespace rw::tools
