// Backpressure on a node's TCP endpoint: while an accepted connection's reading is
// paused, no frame of it reaches the sink (the rest waits in the socket); resumed, every
// frame comes, in order, including one read just before the pause.

#include <chrono>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "transports/tcp/endpoint.hpp"

namespace rw_unit_tcp_pause {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;

namespace {

struct counting_sink final : frame_sink {
  std::vector<uint64_t> clocks;
  connection_ptr last;
  std::vector<std::byte> scratch = std::vector<std::byte>(4096);
  payload_target on_header(const connection_ptr&, const frame_header&) override {
    return payload_target::into(scratch.data());
  }
  void on_frame(const connection_ptr& c, const frame_header& h,
                payload_target&) override {
    clocks.push_back(h.clock);
    last = c;
  }
  void on_closed(const connection_ptr&, errc, const std::string&) override {}
};

frame_header push(uint64_t clock) {
  frame_header h;
  h.kind = frame_kind::push;
  h.clock = clock;
  h.payload_bytes = 1024;
  return h;
}

// Polls `ep` until `sink` has `n` frames or `ms` pass.
void poll_for(tcp::endpoint& ep, counting_sink& sink, size_t n, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (sink.clocks.size() < n && std::chrono::steady_clock::now() < until)
    ep.poll(5, sink);
}

} // namespace

TEST_CASE("a paused connection delivers nothing until it resumes, then all in order",
          "[send_queue]") {
  receive_limits limits{1u << 20, 1u << 16};
  tcp::endpoint node{std::chrono::milliseconds(2000), limits,
                     tcp::accept_policy{1u << 20}};
  auto at = node.listen(tcp::parse_address("127.0.0.1:0"));
  tcp::endpoint client_ep{std::chrono::milliseconds(2000), limits};
  auto client = client_ep.connect(at, std::chrono::milliseconds(2000));
  std::vector<float> payload(256, 1.0f);
  iovec iov{payload.data(), payload.size() * sizeof(float)};
  counting_sink sink;
  REQUIRE(client->send(push(0), &iov, 1));
  poll_for(node, sink, 1, 2000);
  REQUIRE(sink.clocks.size() == 1);
  auto accepted = sink.last;
  REQUIRE(accepted);

  accepted->pause_reading(true);
  for (uint64_t c = 1; c <= 20; ++c)
    REQUIRE(client->send(push(c), &iov, 1));
  poll_for(node, sink, 2, 300); // nothing comes while paused
  CHECK(sink.clocks.size() == 1);

  accepted->pause_reading(false);
  poll_for(node, sink, 21, 2000);
  REQUIRE(sink.clocks.size() == 21);
  for (uint64_t c = 0; c <= 20; ++c)
    CHECK(sink.clocks[c] == c);

  // Paused again, and resumed with nothing new arriving: the frame that waited comes
  // (the endpoint looks at a resumed connection without an event).
  accepted->pause_reading(true);
  REQUIRE(client->send(push(21), &iov, 1));
  poll_for(node, sink, 22, 300);
  CHECK(sink.clocks.size() == 21);
  accepted->pause_reading(false);
  poll_for(node, sink, 22, 2000);
  CHECK(sink.clocks.size() == 22);
  counting_sink drop;
  node.close_all(drop);
  client_ep.close_all(drop);
}

} // namespace rw_unit_tcp_pause
