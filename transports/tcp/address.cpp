#include "transports/tcp/address.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::transports::tcp {

namespace {

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

sockaddr_in resolve(const address& addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(addr.port);
  if (is_wildcard(addr.host)) {
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    return sa;
  }
  if (inet_pton(AF_INET, addr.host.c_str(), &sa.sin_addr) == 1)
    return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(addr.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    throw std::runtime_error(
      fmt::format("cannot resolve host '{}': {}", addr.host, gai_strerror(rc)));
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return sa;
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

} // namespace

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "*" || host == "0.0.0.0";
}

std::string address::to_string() const {
  return fmt::format("{}:{}", host, port);
}

address parse_address(const std::string& text) {
  auto pos = text.rfind(':');
  if (pos == std::string::npos || pos + 1 == text.size())
    throw std::invalid_argument(
      fmt::format("'{}' is not HOST:PORT (for example 127.0.0.1:7700)", text));
  address a;
  a.host = text.substr(0, pos);
  auto port_text = text.substr(pos + 1);
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (errno != 0 || end == port_text.c_str() || *end != '\0' || port < 0 || port > 65535)
    throw std::invalid_argument(
      fmt::format("'{}' in '{}' is not a port number (0..65535)", port_text, text));
  a.port = static_cast<uint16_t>(port);
  return a;
}

int listen_on(const address& addr, int backlog) {
  auto sa = resolve(addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw sys_error("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    auto err = sys_error(fmt::format("cannot listen on {}", addr.to_string()));
    ::close(fd);
    throw err;
  }
  if (::listen(fd, backlog) != 0) {
    auto err = sys_error(fmt::format("cannot listen on {}", addr.to_string()));
    ::close(fd);
    throw err;
  }
  set_nonblocking(fd);
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

void tune_socket(int fd) {
  set_nonblocking(fd);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = 4 * 1024 * 1024;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

void ack_now(int fd) noexcept {
#ifdef TCP_QUICKACK
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#else
  (void)fd;
#endif
}

int connect_to(const address& addr, std::chrono::milliseconds timeout) {
  auto sa = resolve(addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw sys_error("socket");
  tune_socket(fd);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc != 0 && errno != EINPROGRESS) {
    auto err = sys_error(fmt::format("cannot connect to {}", addr.to_string()));
    ::close(fd);
    throw err;
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (rc == 1)
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (rc != 1 || soerr != 0) {
      errno = rc == 0 ? ETIMEDOUT : (soerr != 0 ? soerr : errno);
      auto err = sys_error(fmt::format("cannot connect to {}", addr.to_string()));
      ::close(fd);
      throw err;
    }
  }
  return fd;
}

} // namespace rw::transports::tcp
