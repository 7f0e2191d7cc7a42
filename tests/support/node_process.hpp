#pragma once
// An rw-node started for one test on 127.0.0.1 (a free port), stopped by PID when the
// test ends, with its log in a temporary file the test can read. A node that dies of a
// fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) or with a sanitizer's report, at
// any time up to and including its stop, fails the test that started it, its log kept.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <csignal>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "apps/tools/subprocess.hpp"

namespace rw::testing {

inline std::string temp_path(const std::string& stem) {
  static int counter = 0;
  return "/tmp/rw-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++)
         + "-" + stem;
}

/// A new directory under /tmp for one test (the caller removes it).
inline std::string scratch_dir(const std::string& stem) {
  auto dir = temp_path(stem);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Why a node's end was a crash ("" when it was not): `status` as subprocess::wait_until
/// gives it (128 + a signal) showing a fault's signal, or a sanitizer's report in `log`
/// (ASan and UBSan exit with status 1).
inline std::string crash_of(std::optional<int> status, const std::string& log) {
  if (status && *status > 128) {
    int sig = *status - 128;
    const std::pair<int, const char*> faults[] = {{SIGSEGV, "SIGSEGV"},
                                                  {SIGBUS, "SIGBUS"},
                                                  {SIGILL, "SIGILL"},
                                                  {SIGFPE, "SIGFPE"},
                                                  {SIGABRT, "SIGABRT"}};
    for (auto [fault, name] : faults)
      if (sig == fault)
        return std::string("died of ") + name;
  }
  for (const char* report : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "runtime error:", "WARNING: ThreadSanitizer"})
    if (log.find(report) != std::string::npos)
      return std::string("logged a sanitizer report (") + report + ")";
  return {};
}

/// How a test's node runs. Data-path tests let workers create jobs (open jobs); the
/// cluster tests start coordinators and members that demand tokens.
struct node_role {
  std::string role = "rack-agg";
  bool open_jobs = true;
  std::string coordinator; // --coordinator (a member of another node's cluster)
  std::string listen = "127.0.0.1:0"; // a fixed port: a node started again at one address
};

class node_process {
public:
  explicit node_process(std::vector<std::string> extra = {}, node_role how = {})
    : port_file_(temp_path("port")), log_path_(temp_path("node.log")) {
    std::vector<std::string> argv{RW_NODE_PATH, "--role",      how.role,
                                  "--listen",   how.listen,    "--port-file",
                                  port_file_,   "--log-level", "debug"};
    if (how.open_jobs)
      argv.push_back("--open-jobs");
    if (!how.coordinator.empty()) {
      argv.push_back("--coordinator");
      argv.push_back(how.coordinator);
    }
    // Checkpoints only under a root (none without one): the tests' directories are
    // under /tmp (temp_path). A test that gives its own root keeps it.
    if (std::find(extra.begin(), extra.end(), "--checkpoint-root") == extra.end()) {
      argv.push_back("--checkpoint-root");
      argv.push_back("/tmp");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_.emplace_back(argv, false, log_path_);
    for (int i = 0; i < 200 && address_.empty(); ++i) { // at most 10 s
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto text = read_file(port_file_);
      if (!text.empty() && text.back() == '\n')
        address_ = text.substr(0, text.size() - 1);
    }
    if (address_.empty())
      throw std::runtime_error("rw-node did not start; its log:\n" + log());
  }

  ~node_process() {
    if (proc_.empty())
      return;
    auto& p = proc_.front();
    p.stop(); // SIGTERM, then SIGKILL after 2 s (a test's kill already reaped it)
    auto status = p.wait_until(std::chrono::steady_clock::now());
    std::remove(port_file_.c_str());
    if (auto why = crash_of(status, log()); !why.empty()) {
      // Not an exception: a destructor may run while one is in flight.
      FAIL_CHECK("rw-node (pid " << p.pid() << ") " << why << "; its log, kept at "
                                 << log_path_ << " (tail):\n"
                                 << log_tail(6000));
      return;
    }
    if (std::getenv("RW_KEEP_LOGS") == nullptr) // set: kept for a look after a failure
      std::remove(log_path_.c_str());
  }

  const std::string& address() const { return address_; }
  pid_t pid() const { return proc_.front().pid(); }
  std::string log() const { return read_file(log_path_); }
  /// The log's last `n` characters: what a failed check prints instead of all of it.
  std::string log_tail(size_t n) const {
    auto text = log();
    return text.size() > n ? text.substr(text.size() - n) : text;
  }
  /// Whether `text` shows up in the log within the timeout.
  bool wait_for_log(const std::string& text,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (log().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  /// Where the log ends now: wait_for_log_after(mark, ...) sees only what comes later.
  size_t log_mark() const { return log().size(); }
  bool wait_for_log_after(
    size_t mark, const std::string& text,
    std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto all = log();
      if (all.size() > mark && all.find(text, mark) != std::string::npos)
        return true;
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  tools::subprocess& process() { return proc_.front(); }

private:
  std::string port_file_;
  std::string log_path_;
  std::vector<tools::subprocess> proc_;
  std::string address_;
};

/// A rack-agg on 127.0.0.1:0 started with `args` that is expected to stop on its own
/// (within 20 s): its exit code (none if it did not stop) and what it logged.
struct start_failure {
  std::optional<int> code;
  std::string log;
};
inline start_failure node_that_stops(const std::vector<std::string>& args) {
  auto log = temp_path("stops.log");
  std::vector<std::string> argv{RW_NODE_PATH, "--role", "rack-agg", "--listen",
                                "127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  tools::subprocess p{argv, false, log};
  start_failure out;
  out.code = p.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(20));
  out.log = read_file(log);
  std::remove(log.c_str());
  return out;
}

} // namespace rw::testing
