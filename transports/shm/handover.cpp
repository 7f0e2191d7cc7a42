#include "transports/shm/handover.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include "runtime/credentials.hpp"

namespace rw::transports::shm {

namespace {

constexpr size_t max_fds = 4; // per offer: the doorbell and a job's parameters today

std::runtime_error handover_error(const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

// A fresh ticket: the project's random challenge (libsodium), as bytes.
std::string new_ticket() {
  auto nonce = runtime::make_nonce();
  return {reinterpret_cast<const char*>(nonce.data()), nonce.size()};
}

// Compares two tickets in time that does not depend on where they differ.
bool same_ticket(const std::string& a, const std::string& b) noexcept {
  return a.size() == handover::ticket_bytes && b.size() == handover::ticket_bytes
         && crypto_verify_32(reinterpret_cast<const unsigned char*>(a.data()),
                             reinterpret_cast<const unsigned char*>(b.data()))
              == 0;
}

// The abstract socket address of `name` (no leading NUL) and its length.
socklen_t abstract_address(const std::string& name, sockaddr_un& a) {
  std::memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(a.sun_path))
    throw std::runtime_error(
      fmt::format("'{}' is no handover socket name", name.substr(0, 64)));
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

} // namespace

handover::handover(handover_limits limits) : limits_(limits) {
  auto name = fmt::format("rackweave-{}-{:016x}", getpid(), runtime::random_u64());
  listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener_ < 0)
    throw handover_error("cannot open the shared memory handover socket");
  sockaddr_un a;
  auto len = abstract_address(name, a);
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0
      || ::listen(listener_, static_cast<int>(limits_.max_connections)) != 0
      || ::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    auto err = handover_error("cannot listen on the shared memory handover socket @"
                              + name);
    ::close(listener_);
    throw err;
  }
  address_ = "@" + name;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "rw-shm-handover");
    run();
  });
}

handover::~handover() {
  char b = 1;
  (void)!::write(wake_[1], &b, 1);
  if (thread_.joinable())
    thread_.join();
  for (auto& s : strangers_)
    ::close(s.fd);
  for (auto& t : tickets_)
    close_all(t.fds);
  ::close(listener_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void handover::close_all(std::vector<int>& fds) noexcept {
  for (int fd : fds)
    ::close(fd);
  fds.clear();
}

std::string handover::offer(const std::vector<handover_segment>& segments) {
  if (segments.empty() || segments.size() > max_fds)
    throw std::logic_error("a handover offers 1 to 4 segments");
  offered o;
  for (auto& s : segments) {
    int fd = ::open(s.name.c_str(), (s.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) {
      auto err = handover_error("cannot open shared memory " + s.name
                                + " to hand it over");
      close_all(o.fds);
      throw err;
    }
    o.fds.push_back(fd);
  }
  o.ticket = new_ticket();
  auto now = std::chrono::steady_clock::now();
  o.expires = now + limits_.ticket_life;
  std::lock_guard<std::mutex> guard{mtx_};
  expire_tickets(now);
  while (!tickets_.empty() && tickets_.size() >= limits_.max_tickets) {
    close_all(tickets_.front().fds); // the oldest: its worker is long gone
    tickets_.erase(tickets_.begin());
  }
  tickets_.push_back(std::move(o));
  return tickets_.back().ticket;
}

size_t handover::outstanding() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return tickets_.size();
}

void handover::expire_tickets(std::chrono::steady_clock::time_point now) {
  auto gone = std::remove_if(tickets_.begin(), tickets_.end(), [&](offered& t) {
    if (t.expires > now)
      return false;
    close_all(t.fds);
    return true;
  });
  tickets_.erase(gone, tickets_.end());
}

void handover::report(std::chrono::steady_clock::time_point now) {
  auto refused = refused_.load();
  if (refused == reported_ || now < next_report_)
    return;
  spdlog::warn("shared memory handover: {} connection(s) refused since the last report "
               "(a ticket no welcome gave, used or expired, or none within {} ms)",
               refused - reported_, limits_.connection_time.count());
  reported_ = refused;
  next_report_ = now + std::chrono::minutes(1);
}

void handover::run() {
  std::vector<pollfd> fds;
  while (true) {
    auto now = std::chrono::steady_clock::now();
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    // A full house takes no more: they wait in the backlog for a slot (or their own
    // timeout) rather than being closed at once.
    bool room = strangers_.size() < limits_.max_connections;
    fds.push_back({listener_, static_cast<short>(room ? POLLIN : 0), 0});
    auto wait = std::chrono::milliseconds(1000); // tickets expire meanwhile
    for (auto& s : strangers_) {
      fds.push_back({s.fd, POLLIN, 0});
      wait = std::min(
        wait, std::chrono::duration_cast<std::chrono::milliseconds>(s.deadline - now)
                + std::chrono::milliseconds(1));
    }
    int n = ::poll(fds.data(), fds.size(),
                   static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    if (n < 0 && errno != EINTR) {
      spdlog::error("shared memory handover stopped: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0)
      return;
    now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < strangers_.size(); ++i)
      if (fds[i + 2].revents != 0)
        serve(strangers_[i]);
    if (fds[1].revents != 0)
      while (strangers_.size() < limits_.max_connections) {
        int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
          break;
        strangers_.push_back({fd, now + limits_.connection_time, {}});
      }
    for (auto& s : strangers_)
      if (s.fd >= 0 && s.deadline <= now) {
        ++refused_; // counted before the peer can see it
        ::close(s.fd);
        s.fd = -1;
      }
    strangers_.erase(std::remove_if(strangers_.begin(), strangers_.end(),
                                    [](const stranger& s) { return s.fd < 0; }),
                     strangers_.end());
    {
      std::lock_guard<std::mutex> guard{mtx_};
      expire_tickets(now);
    }
    report(now);
  }
}

void handover::serve(stranger& s) {
  char buf[ticket_bytes];
  auto n = ::recv(s.fd, buf, ticket_bytes - s.got.size(), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (n <= 0) { // closed, or broken, before its ticket was in
    ++refused_;
    ::close(s.fd);
    s.fd = -1;
    return;
  }
  s.got.append(buf, static_cast<size_t>(n));
  if (s.got.size() < ticket_bytes)
    return;
  answer(s.fd, s.got);
  ::close(s.fd);
  s.fd = -1;
}

void handover::answer(int fd, const std::string& ticket) {
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    // Every outstanding ticket compared, each in constant time: how long the search
    // took says nothing about any of them.
    auto found = tickets_.end();
    for (auto it = tickets_.begin(); it != tickets_.end(); ++it)
      if (same_ticket(it->ticket, ticket))
        found = it;
    if (found != tickets_.end()) {
      if (found->expires > std::chrono::steady_clock::now())
        fds = std::move(found->fds);
      else
        close_all(found->fds);
      tickets_.erase(found); // used once, whatever came of it
    }
  }
  auto count = static_cast<unsigned char>(fds.size());
  iovec iov{&count, 1};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds)] = {};
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    auto* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  // Counted before the answer goes: a worker told "refused" finds it counted (a test
  // once read the count between the two).
  if (fds.empty())
    ++refused_;
  // One byte on a fresh socket: never blocks. A worker gone meanwhile loses nothing.
  (void)::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  close_all(fds);
}

std::vector<int> collect_handover(const std::string& address, const std::string& ticket,
                                  std::chrono::milliseconds timeout) {
  if (address.size() < 2 || address[0] != '@')
    throw std::runtime_error(fmt::format(
      "'{}' is not a shared memory handover address (@NAME)", address.substr(0, 64)));
  if (ticket.size() != handover::ticket_bytes)
    throw std::runtime_error(fmt::format("a handover ticket is {} bytes, not {}",
                                         handover::ticket_bytes, ticket.size()));
  sockaddr_un a;
  auto len = abstract_address(address.substr(1), a);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw handover_error("cannot open a unix socket");
  auto fail = [&](const std::string& what) {
    auto err = handover_error(what);
    ::close(fd);
    return err;
  };
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  // Bounds connect (a full backlog), send and receive alike.
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0
      || ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
    throw fail("cannot bound the handover's time");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0)
    throw fail("cannot reach the node's shared memory handover " + address
               + " (one network namespace is needed)");
  if (::send(fd, ticket.data(), ticket.size(), MSG_NOSIGNAL)
      != static_cast<ssize_t>(ticket.size()))
    throw fail("cannot send the handover ticket");
  unsigned char count = 0;
  iovec iov{&count, 1};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds)] = {};
  m.msg_control = control;
  m.msg_controllen = sizeof(control);
  ssize_t n;
  do
    n = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    throw fail(errno == EAGAIN || errno == EWOULDBLOCK
                 ? fmt::format("no handover answer within {} ms", timeout.count())
                 : std::string("the handover failed"));
  ::close(fd);
  std::vector<int> fds;
  for (auto* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int got;
        std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(got);
      }
    }
  auto refuse = [&](const std::string& why) {
    for (int f : fds)
      ::close(f);
    return std::runtime_error(why);
  };
  if (n == 0)
    throw refuse("the node closed the shared memory handover without an answer");
  if ((m.msg_flags & MSG_CTRUNC) != 0)
    throw refuse("the node handed over more descriptors than a worker takes");
  if (count == 0)
    throw refuse("the node refused the handover ticket (used, expired, or not its own)");
  if (fds.size() != count)
    throw refuse(fmt::format("the node said {} descriptors and handed over {}",
                             unsigned{count}, fds.size()));
  return fds;
}

} // namespace rw::transports::shm
