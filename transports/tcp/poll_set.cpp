#include "transports/tcp/poll_set.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::transports::tcp {

namespace {
constexpr uint32_t reading = EPOLLIN | EPOLLRDHUP;
} // namespace

poll_set::poll_set() : fd_(epoll_create1(EPOLL_CLOEXEC)) {
  if (fd_ < 0)
    throw std::runtime_error(fmt::format("epoll_create1: {}", std::strerror(errno)));
}

poll_set::~poll_set() {
  ::close(fd_);
}

void poll_set::add(int fd, bool listener) {
  epoll_event ev{};
  ev.events = listener ? EPOLLIN : reading;
  ev.data.fd = fd;
  epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &ev);
}

void poll_set::watch(int fd, bool readable, bool writable) {
  epoll_event ev{};
  // Paused: not even EPOLLRDHUP, which would fire again and again (level-triggered)
  // for a peer that closed; a hang-up or an error (always reported) ends the pause.
  ev.events = (readable ? reading : 0u) | (writable ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &ev); // ENOENT once the endpoint dropped it: fine
}

void poll_set::kick(int fd) {
  std::lock_guard<std::mutex> guard{kick_mtx_};
  kicked_.push_back(fd);
}

std::vector<int> poll_set::take_kicked() {
  std::lock_guard<std::mutex> guard{kick_mtx_};
  return std::exchange(kicked_, {});
}

void poll_set::remove(int fd) {
  epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr);
}

int poll_set::wait(epoll_event* events, int max, int timeout_ms) {
  return epoll_wait(fd_, events, max, timeout_ms);
}

} // namespace rw::transports::tcp
