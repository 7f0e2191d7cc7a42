// Several connections' bytes into a locator endpoint (a coordinator-only node's --listen:
// services/locator_sink), interleaved as the input says, over real sockets on
// 127.0.0.1. A buffer one connection's frame lands in must never be moved or written by
// another's (the use-after-free of issue 34, which one stream could not show). Property:
// every hello the locator decodes names a job whose name that same connection sent.
//
// Input: records of [op][length: 2 bytes, little-endian][length bytes]; op's low 2 bits
// pick one of 4 connections (opened on first use), bit 2 closes it after the bytes, bit 3
// lets the endpoint poll twice (a frame read in several pieces) instead of once.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "services/locator_sink.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace tr = rw::transports;
namespace pr = rw::protocol;
namespace tcp = rw::transports::tcp;

namespace {

constexpr size_t connections = 4;

struct client {
  int fd = -1;
  std::string peer; // as the endpoint names it: 127.0.0.1:PORT
  std::string sent; // every byte written so far
};

// Hellos decoded by the locator, by peer address, checked against what it sent.
std::unordered_map<std::string, const client*>* by_peer = nullptr;

tcp::endpoint& endpoint() {
  static auto* ep = [] {
    auto* e = new tcp::endpoint{std::chrono::milliseconds(1000),
                                tr::receive_limits{0, rw::defaults::max_control_bytes, 0},
                                rw::services::locator_policy()};
    e->listen(tcp::parse_address("127.0.0.1:0"));
    return e;
  }();
  return *ep;
}

rw::services::locator_sink& sink() {
  static rw::services::locator_sink s{
    pr::located_msg{"127.0.0.1:1", "fuzz", "coordinator", ""}, "not here",
    [](const pr::hello_msg& hello, const std::string& peer) {
      auto it = by_peer->find(peer);
      if (it == by_peer->end())
        rw::fuzz::fail("a hello from a peer nobody connected as: " + peer);
      if (!hello.spec.name.empty()
          && it->second->sent.find(hello.spec.name) == std::string::npos)
        rw::fuzz::fail("connection " + peer + " is answered about job '" + hello.spec.name
                       + "', which it never sent");
      return pr::error_msg{rw::errc::moved, "elsewhere", {"127.0.0.1:2"}};
    }};
  return s;
}

// Connects `c`; false if the machine has no socket or port for it now (not a finding).
bool open_client(client& c, const tcp::address& at) {
  c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(at.port);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (c.fd < 0)
    return false;
  // Closed with a reset, not a FIN: thousands of inputs a second would otherwise leave
  // their ports in TIME_WAIT and run the machine out of them.
  linger abort_close{1, 0};
  ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
  if (::connect(c.fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(c.fd);
    c.fd = -1;
    return false;
  }
  ::fcntl(c.fd, F_SETFL, O_NONBLOCK);
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  ::getsockname(c.fd, reinterpret_cast<sockaddr*>(&me), &len);
  c.peer = "127.0.0.1:" + std::to_string(ntohs(me.sin_port));
  c.sent.clear();
  return true;
}

void close_client(client& c) {
  if (c.fd >= 0)
    ::close(c.fd);
  c.fd = -1;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& ep = endpoint();
  auto& s = sink();
  static tcp::address at = tcp::parse_address(ep.describe().substr(6)); // "tcp://"
  std::array<client, connections> clients;
  std::unordered_map<std::string, const client*> peers;
  by_peer = &peers;
  size_t i = 0;
  while (i + 3 <= size) {
    uint8_t op = data[i];
    size_t len = size_t(data[i + 1]) | size_t(data[i + 2]) << 8;
    i += 3;
    len = std::min(len, size - i);
    auto& c = clients[op % connections];
    if (c.fd < 0) {
      if (!open_client(c, at))
        break;
      peers[c.peer] = &c;
    }
    if (len > 0) {
      auto n = ::send(c.fd, data + i, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0)
        c.sent.append(reinterpret_cast<const char*>(data + i), size_t(n));
    }
    i += len;
    ep.poll(0, s);
    if (op & 8)
      ep.poll(0, s);
    if (op & 4)
      close_client(c); // its address stays in `peers`: a hello it sent may still come
  }
  ep.poll(0, s); // what came last is read before the peers go
  for (auto& c : clients)
    close_client(c);
  // Every connection seen gone before the next input (bounded).
  for (int k = 0; k < 200 && ep.connection_count() > 0; ++k)
    ep.poll(1, s);
  if (ep.connection_count() > 0)
    rw::fuzz::fail("the endpoint still holds connections its peers closed");
  by_peer = nullptr;
  return 0;
}
