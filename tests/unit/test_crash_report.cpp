// The report a program writes when it dies of a fault (apps/tools/crash_report.hpp):
// a child process installs it, faults, and the parent reads what reached its stderr
// and how it died.

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "apps/tools/crash_report.hpp"

namespace rw_unit_crash_report {

namespace {

struct death {
  std::string stderr_text;
  int signal = 0; // 0: it did not die of a signal
};

// Runs `fault` in a child with the report installed; its stderr is a pipe read here
// until it closes; the child must have ended within 10 s.
template <class Fault>
death run_child(Fault fault) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::signal(SIGABRT, SIG_DFL);
    rw::tools::install_crash_report("probe");
    fault();
    ::_exit(0);
  }
  ::close(fds[1]);
  death d;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    auto n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0)
      break;
    d.stderr_text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  // Its stderr closes before it becomes a zombie: wait for that too, within the 10 s.
  int status = 0;
  pid_t ended = 0;
  while ((ended = ::waitpid(pid, &status, WNOHANG)) == 0
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (ended == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL("the child did not end within 10 s; its stderr:\n" << d.stderr_text);
  }
  if (WIFSIGNALED(status))
    d.signal = WTERMSIG(status);
  return d;
}

// A sanitizer build installs the sanitizer's report instead (ctest marks it skipped).
bool skipped_in_sanitizer_build() {
  if (rw::tools::crash_report_enabled)
    return false;
  WARN("SKIPPED: a sanitizer build reports faults itself");
  std::cout << "SKIPPED: a sanitizer build reports faults itself\n";
  return true;
}

[[gnu::noinline]] void write_to_address_16() {
  volatile uintptr_t address = 16; // read at run time: no compiler warning, a real fault
  *reinterpret_cast<volatile int*>(address) = 1;
}

} // namespace

TEST_CASE("a fault in a program with the crash report installed names the signal, "
          "the address and the thread, gives a backtrace, and still dies of it",
          "[crash_report]") {
  if (skipped_in_sanitizer_build())
    return;
  auto d = run_child([] { write_to_address_16(); });
  INFO(d.stderr_text);
  CHECK(d.signal == SIGSEGV);
  CHECK(d.stderr_text.find("probe: fatal signal SIGSEGV (address 0x10) in thread ") == 0);
  CHECK(d.stderr_text.find("; backtrace:\n") != std::string::npos);
  // One line per frame after the head: at least the handler, the fault, main's side.
  auto frames = std::count(d.stderr_text.begin(), d.stderr_text.end(), '\n') - 1;
  CHECK(frames >= 3);
}

TEST_CASE("a fault in a thread other than main is reported once, from that thread",
          "[crash_report]") {
  if (skipped_in_sanitizer_build())
    return;
  auto d = run_child([] {
    std::thread t{[] {
      ::pthread_setname_np(::pthread_self(), "faulty-worker");
      write_to_address_16();
    }};
    t.join();
  });
  INFO(d.stderr_text);
  CHECK(d.signal == SIGSEGV);
  CHECK(d.stderr_text.find("(faulty-worker); backtrace:") != std::string::npos);
  auto first = d.stderr_text.find("fatal signal");
  CHECK(d.stderr_text.find("fatal signal", first + 1) == std::string::npos);
}

TEST_CASE("abort() is reported without an address and ends as SIGABRT",
          "[crash_report]") {
  if (skipped_in_sanitizer_build())
    return;
  auto d = run_child([] { std::abort(); });
  INFO(d.stderr_text);
  CHECK(d.signal == SIGABRT);
  CHECK(d.stderr_text.find("probe: fatal signal SIGABRT in thread ") == 0);
}

} // namespace rw_unit_crash_report
