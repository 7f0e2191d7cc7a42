#include "transports/tcp/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rw::transports::tcp {

namespace {

constexpr size_t max_kicked = 64; // resumed connections looked at per poll

std::string host_of(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf));
  return buf;
}

// The host a connection counts against for max_per_host: its address, except that every
// loopback address (127.0.0.0/8) is this host, one host however many of them it uses.
std::string host_key(const sockaddr_in& sa) {
  if ((ntohl(sa.sin_addr.s_addr) >> 24) == 127)
    return "loopback (127.0.0.0/8)";
  return host_of(sa);
}

// How long the listener goes unwatched after accept failed for want of descriptors or
// memory, and how often that is logged.
constexpr auto accept_pause = std::chrono::milliseconds(100);
constexpr auto accept_failure_log_every = std::chrono::seconds(60);

} // namespace

endpoint::endpoint(std::chrono::milliseconds io_timeout, receive_limits limits,
                   accept_policy accepting)
  : io_timeout_(io_timeout), limits_(limits), accepting_(accepting),
    set_(std::make_shared<poll_set>()) {}

endpoint::~endpoint() {
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
}

address endpoint::listen(const address& addr) {
  listen_fd_ = listen_on(addr);
  set_->add(listen_fd_, true);
  bound_ = addr;
  bound_.port = bound_port(listen_fd_);
  return bound_;
}

std::string endpoint::describe() const {
  if (listen_fd_ < 0)
    return fmt::format("tcp (client, {} connections)", conns_.size());
  return "tcp://" + bound_.to_string();
}

std::shared_ptr<connection> endpoint::add(int fd, std::string peer,
                                          uint64_t queue_bytes) {
  send_policy policy{io_timeout_, queue_bytes, queue_bytes > 0 ? set_ : nullptr};
  auto c = std::make_shared<connection>(fd, std::move(peer), std::move(policy), limits_);
  set_->add(fd);
  conns_[fd] = c;
  return c;
}

std::shared_ptr<connection> endpoint::connect(const address& addr,
                                              std::chrono::milliseconds timeout) {
  int fd = connect_to(addr, timeout);
  return add(fd, addr.to_string(), 0);
}

void endpoint::accept_all(frame_sink& sink) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        pause_accepting(errno);
      return; // EAGAIN, or a transient failure (ECONNABORTED...): on the next poll
    }
    tune_socket(fd);
    auto host = host_key(sa);
    auto c = add(fd, fmt::format("{}:{}", host_of(sa), ntohs(sa.sin_port)),
                 accepting_.send_queue_bytes);
    c->treat_as_stranger(accepting_.stranger_bytes);
    auto& from_host = per_host_[host];
    ++from_host;
    host_of_[fd] = host;
    if (accepting_.max_per_host > 0 && from_host > accepting_.max_per_host) {
      c->cut(sink, errc::unavailable,
             fmt::format("host {} holds {} connections to this endpoint already (at most "
                         "{}, --max-peer-connections)",
                         host, from_host - 1, accepting_.max_per_host));
      drop(fd);
      continue;
    }
    if (accepting_.max_strangers > 0 && count_strangers() >= accepting_.max_strangers) {
      c->cut(sink, errc::unavailable,
             fmt::format("{} connections to this endpoint have not joined a job yet: try "
                         "again later",
                         accepting_.max_strangers));
      drop(fd);
      continue;
    }
    if (accepting_.max_strangers_per_host > 0) {
      auto held = count_strangers(&host);
      if (held >= accepting_.max_strangers_per_host) {
        c->cut(sink, errc::unavailable,
               fmt::format("host {} holds {} connections to this endpoint that have not "
                           "joined a job (at most {} per host, --max-peer-strangers): "
                           "try again later",
                           host, held, accepting_.max_strangers_per_host));
        drop(fd);
        continue;
      }
    }
    unjoined_.insert(fd);
  }
}

size_t endpoint::count_strangers(const std::string* host) {
  size_t n = 0;
  for (auto it = unjoined_.begin(); it != unjoined_.end();) {
    auto c = conns_.find(*it);
    auto a = c == conns_.end() ? admission::joined : c->second->admitted();
    if (a == admission::joined) {
      it = unjoined_.erase(it);
      continue;
    }
    bool counted = true;
    if (host != nullptr) {
      auto h = host_of_.find(*it);
      counted = h != host_of_.end() && h->second == *host;
    }
    n += a == admission::stranger && counted ? 1 : 0;
    ++it;
  }
  return n;
}

void endpoint::pause_accepting(int error) {
  auto now = clock::now();
  accept_paused_ = true;
  accept_paused_until_ = now + accept_pause;
  set_->watch(listen_fd_, false, false);
  ++accept_failures_;
  if (accept_failure_logged_ == clock::time_point{}
      || now - accept_failure_logged_ >= accept_failure_log_every) {
    spdlog::warn(
      "{}: cannot accept connections: {} ({} time(s) since the last such line); "
      "not accepting for {} ms at a time until it passes{}",
      describe(), std::strerror(error), accept_failures_, accept_pause.count(),
      error == EMFILE || error == ENFILE
        ? ": raise the open-file limit (ulimit -n, LimitNOFILE=) or lower "
          "--max-peer-connections"
        : "");
    accept_failure_logged_ = now;
    accept_failures_ = 0;
  }
}

void endpoint::drop(int fd) {
  set_->remove(fd);
  conns_.erase(fd);
  unjoined_.erase(fd);
  if (auto it = host_of_.find(fd); it != host_of_.end()) {
    if (auto h = per_host_.find(it->second); h != per_host_.end() && --h->second == 0)
      per_host_.erase(h);
    host_of_.erase(it);
  }
}

void endpoint::cut_overstayed(frame_sink& sink) {
  auto now = clock::now();
  if (limits_.first_frame_ms == 0 || unjoined_.empty() || now < next_sweep_)
    return;
  auto limit = std::chrono::milliseconds(limits_.first_frame_ms);
  next_sweep_ = now + std::min(limit / 2, std::chrono::milliseconds(500));
  std::vector<std::pair<int, std::string>> over;
  for (auto it = unjoined_.begin(); it != unjoined_.end();) {
    auto c = conns_.find(*it);
    if (c == conns_.end() || c->second->admitted() == admission::joined) {
      it = unjoined_.erase(it);
      continue;
    }
    if (auto why = c->second->overstayed(now, limit); !why.empty())
      over.emplace_back(*it, std::move(why));
    ++it;
  }
  for (auto& [fd, why] : over) {
    auto c = conns_[fd];
    c->cut(sink, errc::timeout, why);
    drop(fd);
  }
}

void endpoint::cut_stalled() {
  if (accepting_.send_queue_bytes == 0)
    return;
  auto now = clock::now();
  if (now < next_stall_check_)
    return;
  next_stall_check_ = now + std::min(io_timeout_ / 4, std::chrono::milliseconds(1000));
  // A cut connection reads its end of stream next and reports the reason then.
  for (auto& [fd, c] : conns_)
    c->check_stalled(now);
}

int endpoint::poll(int timeout_ms, frame_sink& sink) {
  epoll_event events[64 + max_kicked];
  auto kicked = set_->take_kicked();
  if (accept_paused_ && clock::now() >= accept_paused_until_) {
    accept_paused_ = false;
    set_->watch(listen_fd_, true, false);
  }
  int n = set_->wait(events, 64, kicked.empty() ? timeout_ms : 0);
  cut_overstayed(sink);
  cut_stalled();
  n = std::max(n, 0);
  // Connections whose reading resumed: looked at as if readable (a frame read before
  // the pause announces itself with no event). More than fit wait for the next poll.
  for (size_t i = 0; i < kicked.size(); ++i) {
    if (i >= max_kicked) {
      set_->kick(kicked[i]);
      continue;
    }
    events[n].events = EPOLLIN;
    events[n].data.fd = kicked[i];
    ++n;
  }
  if (n == 0)
    return 0;
  // The sink decides who goes first when several are ready (the furthest behind).
  auto rank_of = [&](const epoll_event& e) -> uint64_t {
    auto it = conns_.find(e.data.fd);
    return it == conns_.end() ? 0 : sink.priority(it->second);
  };
  std::stable_sort(events, events + n, [&](const epoll_event& a, const epoll_event& b) {
    return rank_of(a) < rank_of(b);
  });
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == listen_fd_) {
      accept_all(sink);
      continue;
    }
    auto it = conns_.find(fd);
    if (it == conns_.end())
      continue;
    auto conn = it->second; // keep alive across the sink's callbacks
    if (events[i].events & EPOLLOUT)
      conn->write_ready();
    if (events[i].events & (EPOLLHUP | EPOLLERR))
      conn->pause_reading(false); // a paused peer that is gone: read its end now
    if ((events[i].events & ~uint32_t{EPOLLOUT}) != 0 && !conn->read_ready(sink))
      drop(fd);
  }
  return n;
}

void endpoint::close_all(frame_sink& sink) {
  auto conns = std::move(conns_);
  conns_.clear();
  unjoined_.clear();
  per_host_.clear();
  host_of_.clear();
  for (auto& [fd, c] : conns) {
    set_->remove(fd);
    c->report_closed(sink, errc::io_error, "endpoint shut down");
  }
  if (listen_fd_ >= 0) {
    set_->remove(listen_fd_);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

} // namespace rw::transports::tcp
