#pragma once
// Child processes for the bench driver, the demo and the tests: started with argv (no
// shell), stdout optionally captured through a pipe, waited for with a deadline, and
// always stopped by PID (SIGTERM, then SIGKILL) when the handle goes away.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace rw::tools {

class subprocess {
public:
  /// Starts argv[0] (a path) with `argv`; stderr goes to `stderr_path` when given, and
  /// so does stdout unless it is captured (the child then holds none of this process's
  /// output, whoever reads it). Throws std::runtime_error on failure.
  subprocess(std::vector<std::string> argv, bool capture_stdout,
             const std::string& stderr_path = {});
  ~subprocess();

  subprocess(subprocess&& other) noexcept;
  subprocess& operator=(subprocess&&) = delete;
  subprocess(const subprocess&) = delete;

  pid_t pid() const noexcept { return pid_; }
  /// The read end of the stdout pipe (-1 if not captured).
  int stdout_fd() const noexcept { return out_fd_; }

  /// Reads everything the child writes to stdout until EOF or the deadline.
  std::string read_all(std::chrono::steady_clock::time_point deadline);

  /// Waits for exit until the deadline; the exit code, 128+signal, or nullopt.
  std::optional<int> wait_until(std::chrono::steady_clock::time_point deadline);

  /// SIGTERM, a grace period, then SIGKILL; reaps the child.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  /// Sends a signal without waiting.
  void signal(int sig);

private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::optional<int> status_;
};

/// The directory of the running executable (for finding sibling binaries).
std::string self_dir();

} // namespace rw::tools
