// A node's sends never wait on one peer: what a socket does not take is queued (in
// order), drained when the socket is writable, and a peer that takes nothing, or lets
// too much pile up, is cut off with the reason. Over a socket pair, no node needed.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transports/tcp/connection.hpp"
#include "transports/tcp/send_queue.hpp"

namespace rw_unit_send_queue {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t payload_bytes = 32 * 1024;

struct pair_of_sockets {
  int node = -1, peer = -1;
  pair_of_sockets() {
    int fds[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    node = fds[0];
    peer = fds[1];
    int small = 64 * 1024; // the kernel fills after a few frames
    setsockopt(node, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    fcntl(node, F_SETFL, fcntl(node, F_GETFL) | O_NONBLOCK);
  }
  ~pair_of_sockets() {
    if (peer >= 0)
      ::close(peer);
  }
};

frame_header update(uint64_t seq) {
  frame_header h;
  h.kind = frame_kind::update;
  h.clock = seq;
  h.payload_bytes = payload_bytes;
  return h;
}

// Reads one whole frame from the peer's (blocking) socket: its clock, or UINT64_MAX if
// it did not come whole or a payload byte is not its sequence number's low byte. No
// Catch2 assertion inside: it runs on a reader thread too.
uint64_t read_update(int fd) {
  std::vector<std::byte> buf(frame_header_bytes + payload_bytes);
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n <= 0)
      return UINT64_MAX;
    got += static_cast<size_t>(n);
  }
  frame_header h;
  std::string why;
  if (decode(buf.data(), h, why) != errc::ok)
    return UINT64_MAX;
  for (size_t i = frame_header_bytes; i < buf.size(); i += 4096)
    if (buf[i] != static_cast<std::byte>(h.clock & 0xff))
      return UINT64_MAX;
  return h.clock;
}

struct quiet_sink final : frame_sink {
  errc code = errc::ok;
  std::string why;
  payload_target on_header(const connection_ptr&, const frame_header&) override {
    return payload_target::dropped();
  }
  void on_frame(const connection_ptr&, const frame_header&, payload_target&) override {}
  void on_closed(const connection_ptr&, errc c, const std::string& w) override {
    code = c;
    why = w;
  }
};

std::shared_ptr<tcp::connection> queued(int fd, uint64_t limit,
                                        std::chrono::milliseconds io) {
  tcp::send_policy p{io, limit, std::make_shared<tcp::poll_set>()};
  p.waker->add(fd);
  return std::make_shared<tcp::connection>(fd, "peer", p,
                                           receive_limits{1 << 20, 1 << 20});
}

} // namespace

TEST_CASE("send_queue keeps bytes in order across blocks and partial writes",
          "[send_queue]") {
  tcp::send_queue q;
  std::vector<std::byte> a(300 * 1024), b(10);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<std::byte>(i * 7);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::byte>(200 + i);
  iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  q.append(iov, 2);
  CHECK(q.bytes() == a.size() + b.size());

  pair_of_sockets s;
  std::vector<std::byte> got;
  for (int round = 0; round < 1000 && !q.empty(); ++round) {
    REQUIRE(q.drain(s.node) >= 0);
    std::byte tmp[65536];
    ssize_t n = ::recv(s.peer, tmp, sizeof(tmp), MSG_DONTWAIT);
    if (n > 0)
      got.insert(got.end(), tmp, tmp + n);
  }
  REQUIRE(q.empty());
  std::byte tmp[65536];
  for (ssize_t n; (n = ::recv(s.peer, tmp, sizeof(tmp), MSG_DONTWAIT)) > 0;)
    got.insert(got.end(), tmp, tmp + n);
  ::close(s.node);
  auto want = a;
  want.insert(want.end(), b.begin(), b.end());
  CHECK(got.size() == want.size());
  CHECK(got == want);
}

TEST_CASE(
  "a node's send to a peer that does not read returns at once and queues in order",
  "[send_queue]") {
  pair_of_sockets s;
  auto c = queued(s.node, 64 << 20, 10s);
  std::vector<std::byte> payload(payload_bytes);
  constexpr uint64_t frames = 200; // 6.4 MiB: far past what the sockets hold
  auto start = std::chrono::steady_clock::now();
  for (uint64_t seq = 0; seq < frames; ++seq) {
    std::memset(payload.data(), static_cast<int>(seq & 0xff), payload.size());
    iovec iov{payload.data(), payload.size()};
    REQUIRE(c->send(update(seq), &iov, 1));
  }
  // Before send queues, the first send the peer did not take waited the I/O timeout.
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(c->queued_bytes() > 0);
  // The payload was copied: the caller's memory is free once send returned.
  std::memset(payload.data(), 0xee, payload.size());

  // The peer reads; the endpoint's thread drains on writability.
  std::vector<uint64_t> seen;
  std::thread reader{[&] {
    for (uint64_t seq = 0; seq < frames; ++seq) {
      seen.push_back(read_update(s.peer));
      if (seen.back() == UINT64_MAX)
        return;
    }
  }};
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (c->queued_bytes() > 0 && std::chrono::steady_clock::now() < deadline) {
    c->write_ready();
    std::this_thread::sleep_for(1ms);
  }
  CHECK(c->queued_bytes() == 0);
  if (c->queued_bytes() > 0)
    ::shutdown(s.peer, SHUT_RDWR); // the reader would wait for bytes that never come
  reader.join();
  REQUIRE(seen.size() == frames);
  for (uint64_t seq = 0; seq < frames; ++seq)
    CHECK(seen[seq] == seq);
  CHECK(c->is_open());
}

TEST_CASE("a peer that lets more than the bound pile up is cut off with the reason",
          "[send_queue]") {
  pair_of_sockets s;
  auto c = queued(s.node, 1 << 20, 10s);
  std::vector<std::byte> payload(payload_bytes);
  iovec iov{payload.data(), payload.size()};
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i)
    refused = !c->send(update(i), &iov, 1);
  REQUIRE(refused);
  CHECK_FALSE(c->is_open());
  CHECK_FALSE(c->send(update(0), &iov, 1));
  quiet_sink sink;
  for (int i = 0; i < 100 && c->read_ready(sink); ++i) {
  }
  CHECK(sink.code == errc::timeout);
  CHECK_THAT(sink.why, Catch::Contains("the peer is not reading")
                         && Catch::Contains("the limit is 1048576 (--send-queue-mib)"));
}

TEST_CASE(
  "a peer that takes nothing for the I/O timeout is cut off, one that reads is not",
  "[send_queue]") {
  pair_of_sockets s;
  auto c = queued(s.node, 64 << 20, 300ms);
  std::vector<std::byte> payload(payload_bytes);
  iovec iov{payload.data(), payload.size()};
  for (int i = 0; i < 20; ++i)
    REQUIRE(c->send(update(i), &iov, 1));
  REQUIRE(c->queued_bytes() > 0);
  auto now = std::chrono::steady_clock::now();
  CHECK_FALSE(c->check_stalled(now)); // within the timeout
  std::this_thread::sleep_for(250ms);
  // The peer reads a frame: the queue moves, so the clock starts again (without the
  // progress 250 + 200 ms would be past the 300 ms timeout).
  REQUIRE(read_update(s.peer) == 0);
  c->write_ready();
  CHECK_FALSE(c->check_stalled(std::chrono::steady_clock::now() + 200ms));
  CHECK(c->check_stalled(std::chrono::steady_clock::now() + 1s));
  CHECK_FALSE(c->is_open());
  quiet_sink sink;
  for (int i = 0; i < 100 && c->read_ready(sink); ++i) {
  }
  CHECK(sink.code == errc::timeout);
  CHECK_THAT(sink.why, Catch::Contains("took nothing") && Catch::Contains("300 ms"));
}

TEST_CASE("a client's send still waits for its socket, up to the I/O timeout",
          "[send_queue]") {
  pair_of_sockets s;
  tcp::connection c{s.node, "node", tcp::send_policy{200ms, 0, nullptr},
                    receive_limits{1 << 20, 1 << 20}};
  std::vector<std::byte> payload(payload_bytes);
  iovec iov{payload.data(), payload.size()};
  bool failed = false;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200 && !failed; ++i)
    failed = !c.send(update(i), &iov, 1);
  CHECK(failed);
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  CHECK_FALSE(c.is_open());
}

TEST_CASE("senders on several threads and the draining thread never interleave frames",
          "[send_queue][threads]") {
  pair_of_sockets s;
  auto c = queued(s.node, 256 << 20, 10s);
  constexpr int threads = 3, per_thread = 150;
  // Each frame's payload is filled with its sender's byte; clock = sender * 1000 + seq.
  std::vector<uint64_t> seen;
  std::atomic<bool> reading{true};
  std::thread reader{[&] {
    std::vector<std::byte> buf(frame_header_bytes + payload_bytes);
    for (int n = 0; n < threads * per_thread; ++n) {
      size_t got = 0;
      while (got < buf.size()) {
        ssize_t r = ::read(s.peer, buf.data() + got, buf.size() - got);
        if (r <= 0) {
          reading = false;
          return;
        }
        got += static_cast<size_t>(r);
      }
      frame_header h;
      std::string why;
      bool whole = decode(buf.data(), h, why) == errc::ok;
      for (size_t i = frame_header_bytes; whole && i < buf.size(); i += 512)
        whole = buf[i] == static_cast<std::byte>(h.clock / 1000 + 1);
      seen.push_back(whole ? h.clock : UINT64_MAX);
    }
    reading = false;
  }};
  std::atomic<bool> sending{true};
  std::thread drainer{[&] { // the endpoint's thread
    while (sending || c->queued_bytes() > 0) {
      c->write_ready();
      std::this_thread::sleep_for(200us);
      if (!reading)
        return;
    }
  }};
  std::vector<std::thread> senders;
  std::atomic<int> failed{0};
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      std::vector<std::byte> payload(payload_bytes, static_cast<std::byte>(t + 1));
      for (int i = 0; i < per_thread; ++i) {
        iovec iov{payload.data(), payload.size()};
        if (!c->send(update(static_cast<uint64_t>(t) * 1000 + i), &iov, 1))
          ++failed;
      }
    });
  for (auto& t : senders)
    t.join();
  sending = false;
  drainer.join();
  if (c->queued_bytes() > 0)
    ::shutdown(s.peer, SHUT_RDWR);
  reader.join();
  CHECK(failed == 0);
  REQUIRE(seen.size() == threads * per_thread);
  std::vector<int> next(threads, 0);
  for (auto clock : seen) {
    REQUIRE(clock != UINT64_MAX); // a frame whose bytes were mixed with another's
    auto t = clock / 1000;
    REQUIRE(t < threads);
    CHECK(clock % 1000 == static_cast<uint64_t>(next[t])); // each sender's order kept
    next[t] = static_cast<int>(clock % 1000) + 1;
  }
}

} // namespace rw_unit_send_queue
