#include "apps/tools/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace rw::tools {

subprocess::subprocess(std::vector<std::string> argv, bool capture_stdout,
                       const std::string& stderr_path) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int pipe_fds[2] = {-1, -1};
  if (capture_stdout) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  }
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // Nothing of the parent's output is held by the child: a child that outlives a
    // crashed parent would keep its reader (ctest, a pipe) waiting for the end.
    if (!capture_stdout)
      posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  int rc = posix_spawn(&pid_, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (capture_stdout)
    ::close(pipe_fds[1]);
  if (rc != 0) {
    if (capture_stdout)
      ::close(pipe_fds[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  out_fd_ = pipe_fds[0];
}

subprocess::subprocess(subprocess&& other) noexcept
  : pid_(other.pid_), out_fd_(other.out_fd_), status_(other.status_) {
  other.pid_ = -1;
  other.out_fd_ = -1;
}

subprocess::~subprocess() {
  if (pid_ > 0 && !status_)
    stop();
  if (out_fd_ >= 0)
    ::close(out_fd_);
}

std::string subprocess::read_all(std::chrono::steady_clock::time_point deadline) {
  std::string out;
  if (out_fd_ < 0)
    return out;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return out;
    pollfd p{out_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long>(left, INT_MAX)));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return out;
    ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n <= 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::optional<int> subprocess::wait_until(
  std::chrono::steady_clock::time_point deadline) {
  if (status_ || pid_ <= 0)
    return status_;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (r < 0 && errno != EINTR) {
      status_ = -1;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void subprocess::signal(int sig) {
  if (pid_ > 0 && !status_)
    ::kill(pid_, sig);
}

void subprocess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || status_)
    return;
  ::kill(pid_, SIGTERM);
  if (!wait_until(std::chrono::steady_clock::now() + grace)) {
    ::kill(pid_, SIGKILL);
    wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  }
}

std::string self_dir() {
  char buf[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path = n > 0 ? std::string(buf, static_cast<size_t>(n)) : ".";
  auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : path.substr(0, pos);
}

} // namespace rw::tools
