#pragma once
// A raw HTTP client for the metrics endpoint's tests: one TCP connection to
// 127.0.0.1:PORT whose bytes the test writes as it likes (a trickle, a huge header, a
// body announced and never sent), and what came back, with how long it took.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rw::test {

struct http_reply {
  int status = 0;   // 0: no status line came
  std::string head; // status line and fields
  std::string body;
  bool closed = false; // the server closed (EOF or reset) within the time given
};

class http_probe {
public:
  explicit http_probe(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  ~http_probe() { close(fd_); }
  http_probe(const http_probe&) = delete;
  http_probe& operator=(const http_probe&) = delete;

  /// Sends `bytes`, waiting up to `timeout` for room; false once the server has gone
  /// (reset, broken pipe) or the time is up.
  bool send_all(std::string_view bytes,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (!bytes.empty()) {
      auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        bytes.remove_prefix(size_t(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
      if (left <= 0)
        return false;
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, int(left));
    }
    return true;
  }

  /// Whether the server has closed the connection or answered (a readable socket)
  /// within `wait`.
  bool answered_or_closed(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, int(wait.count())) > 0;
  }

  /// Reads until the server closes or `timeout` passes, and parses what came.
  http_reply read_reply(
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    http_reply r;
    std::string raw;
    auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
      if (left <= 0)
        break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left)) <= 0)
        continue;
      char buf[65536];
      auto n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        r.closed = n == 0 || errno == ECONNRESET;
        if (r.closed || (errno != EINTR && errno != EAGAIN))
          break;
        continue;
      }
      raw.append(buf, size_t(n));
    }
    auto end = raw.find("\r\n\r\n");
    r.head = raw.substr(0, end);
    if (end != std::string::npos)
      r.body = raw.substr(end + 4);
    if (raw.rfind("HTTP/1.1 ", 0) == 0 && raw.size() >= 12)
      r.status = std::stoi(raw.substr(9, 3));
    return r;
  }

  int fd() const { return fd_; }

private:
  int fd_;
};

/// One request on a connection of its own, and its answer.
inline http_reply http_get(int port, const std::string& path,
                           const std::string& fields = {},
                           const std::string& method = "GET") {
  http_probe p{port};
  p.send_all(method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + "\r\n");
  return p.read_reply();
}

/// The value of header field `name` (as written) in a reply's head; "" if none.
inline std::string field(const http_reply& r, const std::string& name) {
  auto at = r.head.find("\r\n" + name + ": ");
  if (at == std::string::npos)
    return {};
  auto start = at + name.size() + 4;
  return r.head.substr(start, r.head.find("\r\n", start) - start);
}

} // namespace rw::test
