// What a peer that has proven nothing may make a node hold (issue 34): payloads gathered
// per connection as they arrive, within a node-wide budget; frames with a deadline;
// strangers that idle closed; the coordinator's unanswered challenges bounded without
// dropping anyone's pending one. Several connections interleaved, as an attacker would.

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "logic/challenge_book.hpp"
#include "transports/byte_budget.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw_unit_admission {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;

namespace {

// Gathers every hello; remembers each connection's payloads and why it closed.
struct gathering_sink final : frame_sink {
  std::map<uint64_t, std::vector<std::vector<std::byte>>> payloads; // by connection id
  std::map<uint64_t, std::string> closed;
  std::vector<connection_ptr> seen;
  admission admit_as = admission::stranger;
  payload_target on_header(const connection_ptr& c, const frame_header&) override {
    seen.push_back(c);
    c->admit(admit_as);
    return payload_target::gathered();
  }
  void on_frame(const connection_ptr& c, const frame_header& h,
                payload_target& t) override {
    payloads[c->id()].emplace_back(t.dst, t.dst + h.payload_bytes);
  }
  void on_closed(const connection_ptr& c, errc, const std::string& why) override {
    closed[c->id()] = why;
  }
};

frame_header hello(uint32_t bytes) {
  frame_header h;
  h.kind = frame_kind::hello;
  h.payload_bytes = bytes;
  return h;
}

// A plain socket to `at` (the client side sends raw bytes in the order a test wants).
struct raw_socket {
  explicit raw_socket(const tcp::address& at) {
    fd = tcp::connect_to(at, std::chrono::seconds(2));
  }
  ~raw_socket() { ::close(fd); }
  void send(const void* p, size_t n) {
    auto* b = static_cast<const char*>(p);
    while (n > 0) {
      auto k = ::send(fd, b, n, MSG_NOSIGNAL);
      REQUIRE(k > 0);
      b += k;
      n -= static_cast<size_t>(k);
    }
  }
  void send_header(const frame_header& h) {
    std::byte head[frame_header_bytes];
    encode(h, head);
    send(head, sizeof(head));
  }
  int fd;
};

void poll_until(tcp::endpoint& ep, frame_sink& sink, int ms,
                const std::function<bool()>& done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done() && std::chrono::steady_clock::now() < until)
    ep.poll(5, sink);
}

std::vector<std::byte> filled(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = std::byte(uint8_t(seed + i * 7));
  return v;
}

// A node-like endpoint on 127.0.0.1: queued sends, strangers' payloads within `budget`
// bytes (0: none), each frame of a stranger whole within `frame_ms` (0: no deadline).
struct node_endpoint {
  tcp::accept_policy policy;
  std::unique_ptr<tcp::endpoint> ep;
  tcp::address at;
  node_endpoint(uint64_t budget, uint32_t frame_ms) {
    policy.send_queue_bytes = 1u << 20;
    if (budget > 0)
      policy.stranger_bytes = std::make_shared<byte_budget>(budget);
    ep = std::make_unique<tcp::endpoint>(std::chrono::milliseconds(2000),
                                         receive_limits{1u << 20, 1u << 20, frame_ms},
                                         policy);
    at = ep->listen(tcp::parse_address("127.0.0.1:0"));
  }
};

} // namespace

TEST_CASE("interleaved connections gather their payloads apart", "[admission]") {
  node_endpoint node{8u << 20, 0};
  auto& ep = *node.ep;
  auto& at = node.at;
  auto& policy = node.policy;
  gathering_sink sink;
  // Three connections, their payloads cut in pieces and sent in turns: a buffer shared
  // between them would be moved (resized) or overwritten under a half-read frame.
  std::vector<std::unique_ptr<raw_socket>> peers;
  std::vector<std::vector<std::byte>> sent;
  for (int i = 0; i < 3; ++i) {
    peers.push_back(std::make_unique<raw_socket>(at));
    sent.push_back(filled(100'000 * (i + 1) + 13, uint8_t(i * 50)));
    peers.back()->send_header(hello(static_cast<uint32_t>(sent.back().size())));
  }
  for (size_t off = 0; off < 300'013; off += 40'000)
    for (int i = 0; i < 3; ++i) {
      if (off >= sent[i].size())
        continue;
      peers[i]->send(sent[i].data() + off,
                     std::min<size_t>(40'000, sent[i].size() - off));
      poll_until(ep, sink, 20, [] { return false; });
    }
  poll_until(ep, sink, 3000, [&] {
    size_t n = 0;
    for (auto& [id, p] : sink.payloads)
      n += p.size();
    return n == 3;
  });
  REQUIRE(sink.payloads.size() == 3);
  std::vector<std::vector<std::byte>> got;
  for (auto& [id, p] : sink.payloads)
    got.push_back(p.at(0));
  std::sort(got.begin(), got.end(), [](auto& a, auto& b) { return a.size() < b.size(); });
  for (int i = 0; i < 3; ++i)
    CHECK(got[i] == sent[i]);
  // Everything gathered was given back.
  CHECK(policy.stranger_bytes->held() == 0);
}

TEST_CASE("a header's announced size takes nothing until its bytes come", "[admission]") {
  node_endpoint node{1u << 20, 0};
  auto& ep = *node.ep;
  auto& at = node.at;
  auto& policy = node.policy;
  gathering_sink sink;
  std::vector<std::unique_ptr<raw_socket>> peers;
  for (int i = 0; i < 50; ++i) {
    peers.push_back(std::make_unique<raw_socket>(at));
    peers.back()->send_header(hello(1u << 20)); // announces 1 MiB, sends 10 bytes
    peers.back()->send("0123456789", 10);
  }
  poll_until(ep, sink, 2000, [&] { return sink.seen.size() == 50; });
  REQUIRE(sink.seen.size() == 50);
  // 4 KiB each (the first step of a gathered payload), not 50 MiB.
  CHECK(policy.stranger_bytes->held() <= 50u * 4096);
  CHECK(sink.closed.empty());
  // A peer that sends its whole megabyte needs the budget's room: the others' steps
  // hold most of it, so it is closed for want of room, and says so.
  auto whole = filled(1u << 20, 3);
  raw_socket big{at};
  big.send_header(hello(1u << 20));
  big.send(whole.data(), whole.size());
  poll_until(ep, sink, 2000, [&] { return sink.closed.size() > 0; });
  bool refused = false;
  for (auto& [id, why] : sink.closed)
    refused |= why.find("--max-unjoined-mib") != std::string::npos;
  CHECK(refused);
  peers.clear();
  poll_until(ep, sink, 2000, [&] { return policy.stranger_bytes->held() == 0; });
  CHECK(policy.stranger_bytes->held() == 0);
}

TEST_CASE("a stranger's frame has a deadline, a joined peer's has none", "[admission]") {
  node_endpoint node{0, 300};
  auto& ep = *node.ep;
  auto& at = node.at;
  gathering_sink sink;
  raw_socket stranger{at};
  stranger.send_header(hello(1000));
  stranger.send("ab", 2);
  poll_until(ep, sink, 100, [&] { return !sink.seen.empty(); });
  sink.admit_as = admission::joined;
  raw_socket member{at};
  member.send_header(hello(1000));
  member.send("ab", 2);
  // The stranger trickles a byte every 50 ms: it is cut at the deadline all the same.
  auto t0 = std::chrono::steady_clock::now();
  while (sink.closed.empty()
         && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3)) {
    stranger.send("x", 1);
    poll_until(ep, sink, 50, [] { return false; });
  }
  REQUIRE(sink.closed.size() == 1);
  CHECK_THAT(sink.closed.begin()->second,
             Catch::Contains("a frame not whole 300 ms after its "
                             "first byte"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
  poll_until(ep, sink, 800, [] { return false; });
  CHECK(sink.closed.size() == 1); // the joined one is not cut
}

TEST_CASE("a stranger idle after a whole frame is closed, one waiting is not",
          "[admission]") {
  node_endpoint node{0, 300};
  auto& ep = *node.ep;
  auto& at = node.at;
  gathering_sink sink;
  raw_socket idle{at};
  idle.send_header(hello(4));
  idle.send("abcd", 4);
  poll_until(ep, sink, 200, [&] { return sink.payloads.size() == 1; });
  REQUIRE(sink.payloads.size() == 1);
  sink.admit_as = admission::waiting;
  raw_socket waiting{at};
  waiting.send_header(hello(4));
  waiting.send("abcd", 4);
  poll_until(ep, sink, 1200, [] { return false; });
  REQUIRE(sink.closed.size() == 1);
  CHECK(sink.closed.count(sink.seen.front()->id()) == 1);
  CHECK_THAT(sink.closed.begin()->second,
             Catch::Contains("idle for 300 ms without joining"));
}

TEST_CASE("a byte budget never passes its limit", "[admission]") {
  byte_budget b{100};
  CHECK(b.take(60));
  CHECK_FALSE(b.take(41));
  CHECK(b.take(40));
  CHECK_FALSE(b.take(1));
  b.give(60);
  CHECK(b.held() == 40);
  CHECK_FALSE(b.take(UINT64_MAX));
  // Threads racing for it: what they hold together never passes the limit.
  byte_budget shared{1000};
  std::atomic<uint64_t> over{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20000; ++i)
        if (shared.take(7)) {
          if (shared.held() > 1000)
            ++over;
          shared.give(7);
        }
    });
  for (auto& t : ts)
    t.join();
  CHECK(over == 0);
  CHECK(shared.held() == 0);
}

TEST_CASE("a flood of askers cannot drop a pending challenge", "[admission]") {
  using book = actors::detail::challenge_book<int>;
  book b{1024, std::chrono::seconds(10)};
  auto t0 = book::clock::now();
  REQUIRE(b.hand_out(-1, "legit", t0)); // a node's proof is on its way
  int refused = 0;
  for (int i = 0; i < 5000; ++i)
    refused += b.hand_out(i, "junk", t0 + std::chrono::milliseconds(i)) ? 0 : 1;
  CHECK(refused == 5000 - 1023);
  CHECK(b.size() == 1024);
  auto got = b.take(-1, t0 + std::chrono::seconds(1));
  REQUIRE(got);
  CHECK(*got == "legit");
  // Expired nonces make room, and are not taken.
  CHECK(b.hand_out(9999, "later", t0 + std::chrono::seconds(30)));
  CHECK_FALSE(b.take(5, t0 + std::chrono::seconds(30)));
}

} // namespace rw_unit_admission
