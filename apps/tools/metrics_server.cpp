#include "apps/tools/metrics_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "apps/tools/bearer_token.hpp"
#include "runtime/prometheus.hpp"

namespace rw::tools {

namespace {

using clock = std::chrono::steady_clock;

std::pair<std::string, int> split_host_port(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw std::runtime_error("--metrics wants HOST:PORT (port 0: any free one), not '" + s
                             + "'");
  auto host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1)
      port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535)
    throw std::runtime_error("--metrics wants HOST:PORT with a port of 0 to 65535, not '"
                             + s + "'");
  return {host, port};
}

// A listening socket on host:port (SO_REUSEADDR only: with SO_REUSEPORT a second node
// would share a busy port instead of being told); -1 if none could be had.
int listen_on(const std::string& host, int port, int& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return -1;
  int fd = -1;
  for (auto* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                a->ai_protocol);
    if (fd < 0)
      continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    bound_port = addr.ss_family == AF_INET6
                   ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                   : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return fd;
}

// After its answer, a connection is read (and what comes discarded) until the client
// closes, for this long and this many bytes at most: closing with unread bytes would
// reset the connection, and the client could lose the answer it has not read yet.
constexpr auto linger_time = std::chrono::milliseconds(1000);
constexpr size_t linger_bytes = 64 * 1024;

} // namespace

class metrics_server::loop {
public:
  loop(int listen_fd, handlers h, metrics_options o)
    : listen_fd_(listen_fd), h_(std::move(h)), o_(std::move(o)) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0)
      throw std::runtime_error(
        fmt::format("the metrics endpoint cannot poll: {}", std::strerror(errno)));
    watch(listen_fd_, EPOLLIN);
    watch(wake_fd_, EPOLLIN);
  }

  ~loop() {
    for (auto& [fd, c] : conns_)
      close(fd);
    close(listen_fd_);
    if (epoll_fd_ >= 0)
      close(epoll_fd_);
    if (wake_fd_ >= 0)
      close(wake_fd_);
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof(one));
  }

  void run() {
    epoll_event events[64];
    while (true) {
      auto n = epoll_wait(epoll_fd_, events, 64, wait_ms());
      if (n < 0 && errno != EINTR) {
        spdlog::error("metrics endpoint: epoll_wait failed: {}", std::strerror(errno));
        return;
      }
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd_)
          return;
        if (fd == listen_fd_) {
          accept_all();
          continue;
        }
        auto it = conns_.find(fd);
        if (it != conns_.end() && !step(it->second, events[i].events))
          drop(fd);
      }
      sweep();
    }
  }

private:
  enum class state { reading, writing, lingering };

  struct connection {
    int fd = -1;
    bool reserve = false; // let in past max_connections: health only
    std::string address;  // the peer's IP address, for max_per_address
    bool counted = false; // in per_address_: a regular one not answered yet
    clock::time_point accepted;
    clock::time_point deadline;
    std::unique_ptr<char[]> head;
    size_t used = 0;
    state st = state::reading;
    uint32_t events = 0;
    std::string out;                         // status line and fields
    std::shared_ptr<const std::string> body; // shared by every scrape of a snapshot
    std::string trailer;
    size_t sent = 0;
    size_t discarded = 0;
  };

  void watch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }

  void rewatch(connection& c, uint32_t events) {
    if (c.events == events)
      return;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = c.fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = events;
  }

  int wait_ms() {
    auto now = clock::now();
    auto next = now + std::chrono::seconds(1);
    if (accept_paused_)
      next = std::min(next, resume_accept_);
    for (auto& [fd, c] : conns_)
      next = std::min(next, c.deadline);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::max<int64_t>(0, ms + 1));
  }

  void accept_all() {
    for (int i = 0; i < 256; ++i) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop listening for a moment rather than spin.
          spdlog::warn("metrics endpoint: cannot accept a connection: {}",
                       std::strerror(errno));
          pause_accept();
        }
        return;
      }
      auto address = address_of(peer);
      auto past_cap = [&] {
        auto a = per_address_.find(address);
        return regular_ >= o_.limits.max_connections
               || (a != per_address_.end() && a->second >= o_.limits.max_per_address);
      };
      bool reserve = past_cap();
      if (reserve && reserved_ >= o_.limits.health_reserve && evict_idle())
        reserve = past_cap();
      if (reserve && reserved_ >= o_.limits.health_reserve) {
        // Full: told so, if its socket takes the answer at once, and closed.
        auto text = answer_text(503, "too many connections\n", {});
        [[maybe_unused]] auto n = send(fd, text.data(), text.size(),
                                       MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
        ++refused_full_;
        continue;
      }
      connection c;
      c.fd = fd;
      c.reserve = reserve;
      c.address = address;
      c.accepted = clock::now();
      c.deadline = c.accepted
                   + (reserve ? o_.limits.reserve_deadline : o_.limits.deadline);
      if (!reserve) {
        ++per_address_[address];
        c.counted = true;
      }
      c.head = std::make_unique<char[]>(o_.limits.max_head_bytes);
      c.events = EPOLLIN | EPOLLRDHUP;
      watch(fd, c.events);
      (reserve ? reserved_ : regular_) += 1;
      conns_.emplace(fd, std::move(c));
    }
  }

  static std::string address_of(const sockaddr_storage& peer) {
    char text[INET6_ADDRSTRLEN] = {};
    if (peer.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, text,
                sizeof(text));
    else if (peer.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, text,
                sizeof(text));
    return text;
  }

  // Cuts the oldest connection that has sent nothing for evict_idle_after (told 408),
  // to make room; false if there is none.
  bool evict_idle() {
    auto now = clock::now();
    int oldest = -1;
    clock::time_point since = now - o_.limits.evict_idle_after;
    for (auto& [fd, c] : conns_)
      if (c.st == state::reading && c.used == 0 && c.accepted <= since) {
        since = c.accepted;
        oldest = fd;
      }
    if (oldest < 0)
      return false;
    auto text = answer_text(408, "idle: its place was taken by a newer connection\n", {});
    [[maybe_unused]] auto n = send(oldest, text.data(), text.size(),
                                   MSG_NOSIGNAL | MSG_DONTWAIT);
    spdlog::debug("metrics endpoint: every place taken: the oldest idle connection "
                  "gave its place to a newer one");
    drop(oldest);
    return true;
  }

  void pause_accept() {
    epoll_event ev{};
    ev.data.fd = listen_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accept_paused_ = true;
    resume_accept_ = clock::now() + std::chrono::milliseconds(100);
  }

  // Handles readiness of `c`; false: close it.
  bool step(connection& c, uint32_t events) {
    switch (c.st) {
      case state::reading: return read_head(c);
      case state::writing:
        return (events & (EPOLLERR | EPOLLHUP)) == 0 && write_answer(c);
      case state::lingering: return linger(c);
    }
    return false;
  }

  bool read_head(connection& c) {
    auto room = o_.limits.max_head_bytes - c.used;
    ssize_t n = room == 0 ? 0 : recv(c.fd, c.head.get() + c.used, room, 0);
    if (n < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (n == 0 && room != 0)
      return false; // the client went before its request was whole
    c.used += size_t(n);
    auto parsed = http::parse_head({c.head.get(), c.used}, o_.limits.max_head_bytes);
    if (std::holds_alternative<http::incomplete>(parsed))
      return true;
    if (auto* b = std::get_if<http::bad>(&parsed)) {
      spdlog::debug("metrics endpoint: refused a request ({}): {}", b->status, b->why);
      respond(c, b->status, b->why + "\n", false,
              b->status == 405 ? "Allow: GET, HEAD\r\n" : "");
    } else {
      answer(c, std::get<http::request>(parsed));
    }
    c.head.reset(); // not needed any more: what follows the head is never read into it
    c.st = state::writing;
    uncount(c);
    return write_answer(c);
  }

  void answer(connection& c, const http::request& r) {
    bool head_only = r.method == "HEAD";
    auto path = http::target_path(r.target);
    bool health = path == "/healthz" || path == "/readyz";
    if (c.reserve && !health)
      return respond(c, 503, "too many connections\n", head_only);
    if (path == "/healthz") {
      if (h_.stopping())
        return respond(c, 503, "stopping\n", head_only);
      return respond(c, 200, "ok\n", head_only);
    }
    if (path == "/readyz") {
      std::string why;
      try {
        why = h_.stopping() ? std::string("stopping") : h_.not_ready();
      } catch (const std::exception&) {
        why = "the readiness check failed";
      }
      if (why.empty())
        return respond(c, 200, "ready\n", head_only);
      return respond(c, 503, why + "\n", head_only);
    }
    if (path == "/metrics") {
      if (!o_.token.empty() && !bearer_token_matches(r.authorization, o_.token))
        return respond(c, 401,
                       "/metrics needs its bearer token: Authorization: Bearer <the line "
                       "of rw-node's --metrics-token-file>\n",
                       head_only,
                       "WWW-Authenticate: Bearer realm=\"rw-node metrics\"\r\n");
      exposition e;
      try {
        e = h_.metrics();
      } catch (const std::exception& ex) {
        return respond(c, 500, std::string("metrics failed: ") + ex.what() + "\n",
                       head_only);
      }
      size_t length = (e.text ? e.text->size() : 0) + e.trailer.size();
      c.out = head_text(200, runtime::prometheus::content_type, length, {});
      if (!head_only) {
        c.body = std::move(e.text);
        c.trailer = std::move(e.trailer);
      }
      return;
    }
    respond(c, 404, "not found: /metrics, /healthz, /readyz\n", head_only);
  }

  static std::string head_text(int status, const char* type, size_t length,
                               const std::string& fields) {
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
                       "Connection: close\r\n{}\r\n",
                       status, http::reason_phrase(status), type, length, fields);
  }

  static std::string answer_text(int status, const std::string& text,
                                 const std::string& fields) {
    return head_text(status, "text/plain; charset=utf-8", text.size(), fields) + text;
  }

  void respond(connection& c, int status, const std::string& text, bool head_only,
               const std::string& fields = {}) {
    c.out = head_only
              ? head_text(status, "text/plain; charset=utf-8", text.size(), fields)
              : answer_text(status, text, fields);
  }

  bool write_answer(connection& c) {
    while (true) {
      iovec parts[3];
      int count = 0;
      size_t skip = c.sent;
      auto add = [&](const char* data, size_t size) {
        if (skip >= size) {
          skip -= size;
          return;
        }
        parts[count++] = {const_cast<char*>(data) + skip, size - skip};
        skip = 0;
      };
      add(c.out.data(), c.out.size());
      if (c.body)
        add(c.body->data(), c.body->size());
      add(c.trailer.data(), c.trailer.size());
      if (count == 0)
        break;
      msghdr msg{};
      msg.msg_iov = parts;
      msg.msg_iovlen = size_t(count);
      auto n = sendmsg(c.fd, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          rewatch(c, EPOLLOUT);
          return true;
        }
        return errno == EINTR;
      }
      c.sent += size_t(n);
    }
    // Written: no more to say; read what the client still sends until it closes.
    shutdown(c.fd, SHUT_WR);
    c.st = state::lingering;
    c.body.reset();
    c.deadline = std::min(c.deadline, clock::now() + linger_time);
    rewatch(c, EPOLLIN | EPOLLRDHUP);
    return linger(c);
  }

  bool linger(connection& c) {
    char scrap[4096];
    while (c.discarded < linger_bytes) {
      auto n = recv(c.fd, scrap, sizeof(scrap), 0);
      if (n == 0)
        return false;
      if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.discarded += size_t(n);
    }
    return false;
  }

  void drop(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end())
      return;
    (it->second.reserve ? reserved_ : regular_) -= 1;
    uncount(it->second);
    close(fd); // leaves the epoll set with it
    conns_.erase(it);
  }

  // A connection whose request is read no longer counts against its address: the cap
  // is on places held without a request (an answered one goes as soon as it is sent).
  void uncount(connection& c) {
    if (!c.counted)
      return;
    c.counted = false;
    if (auto a = per_address_.find(c.address);
        a != per_address_.end() && --a->second == 0)
      per_address_.erase(a);
  }

  // Connections past their deadline: cut (told 408 if still reading their request).
  void sweep() {
    auto now = clock::now();
    if (accept_paused_ && now >= resume_accept_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
      accept_paused_ = false;
    }
    std::vector<int> late;
    for (auto& [fd, c] : conns_)
      if (now >= c.deadline)
        late.push_back(fd);
    for (int fd : late) {
      auto& c = conns_.at(fd);
      if (c.st == state::reading) {
        spdlog::debug(
          "metrics endpoint: a connection sent no whole request in {} ms: cut",
          (c.reserve ? o_.limits.reserve_deadline : o_.limits.deadline).count());
        auto text = answer_text(408, "the request took too long\n", {});
        [[maybe_unused]] auto n = send(fd, text.data(), text.size(),
                                       MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      drop(fd);
    }
  }

  int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  handlers h_;
  metrics_options o_;
  std::unordered_map<int, connection> conns_;
  size_t regular_ = 0;
  size_t reserved_ = 0;
  uint64_t refused_full_ = 0;
  std::unordered_map<std::string, size_t> per_address_; // regular connections
  bool accept_paused_ = false;
  clock::time_point resume_accept_;
};

metrics_server::metrics_server(const std::string& host_port, handlers h,
                               metrics_options o) {
  auto [host, port] = split_host_port(host_port);
  if (o.limits.max_head_bytes == 0 || o.limits.max_connections == 0)
    throw std::invalid_argument(
      "the metrics endpoint needs room for a request and a connection");
  int bound_port = 0;
  int fd = listen_on(host, port, bound_port);
  if (fd < 0)
    throw std::runtime_error("cannot open the metrics port " + host_port
                             + ": another process listens there, or the host is not an "
                               "address of this machine; give another with --metrics "
                               "HOST:PORT (port 0: any free one)");
  loop_ = std::make_unique<loop>(fd, std::move(h), std::move(o));
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":"
             + std::to_string(bound_port);
  // Listening already: connections made from now on wait in the backlog until the
  // thread takes them.
  thread_ = std::thread([l = loop_.get()] { l->run(); });
}

metrics_server::~metrics_server() {
  stop();
}

void metrics_server::stop() {
  if (!thread_.joinable())
    return;
  loop_->wake();
  thread_.join();
  loop_.reset(); // closes the listening socket and every connection
}

} // namespace rw::tools
