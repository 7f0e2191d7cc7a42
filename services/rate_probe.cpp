#include "services/rate_probe.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "protocol/control.hpp"
#include "services/tcp_names.hpp"

namespace rw::services {

namespace {

using clock = std::chrono::steady_clock;

constexpr size_t probe_send_buffer = 2 * defaults::probe_frame_bytes;

// What the probed node answers: an ack (the bytes it took) or an error.
class probe_answer_sink final : public frame_sink {
public:
  payload_target on_header(const connection_ptr&,
                           const protocol::frame_header& h) override {
    if (h.kind == protocol::frame_kind::ack && h.payload_bytes == 0)
      return payload_target::into(nullptr);
    if (h.kind != protocol::frame_kind::error)
      return payload_target::dropped();
    buf.resize(h.payload_bytes);
    return payload_target::into(buf.data());
  }
  void on_frame(const connection_ptr&, const protocol::frame_header& h,
                payload_target& t) override {
    if (t.action == payload_target::discard || answered)
      return;
    answered = true;
    at = clock::now();
    if (h.kind == protocol::frame_kind::ack) {
      bytes = h.clock;
      return;
    }
    protocol::error_msg err;
    std::string why;
    failure = decode(buf.data(), buf.size(), err, why) == errc::ok
                ? fmt::format("the node refused the probe: {}", err.message)
                : "the node refused the probe with an undecodable error: " + why;
  }
  void on_closed(const connection_ptr&, errc, const std::string& why) override {
    if (!answered) {
      answered = true;
      failure = "the node closed the connection without answering: " + why;
    }
  }

  std::vector<std::byte> buf;
  bool answered = false;
  uint64_t bytes = 0;
  clock::time_point at;
  std::string failure;
};

probe_outcome failed(std::string why) {
  probe_outcome out;
  out.error = std::move(why);
  return out;
}

// A send failed: the node's error frame, if it sent one before closing, says why.
probe_outcome refused(endpoint& ep, const std::string& node, std::string fallback) {
  probe_answer_sink sink;
  auto until = clock::now() + std::chrono::milliseconds(100);
  while (!sink.answered && clock::now() < until)
    ep.poll(10, sink);
  if (sink.answered && sink.failure.rfind("the node refused", 0) == 0)
    return failed(fmt::format("{}: {}", node, sink.failure));
  return failed(std::move(fallback));
}

} // namespace

probe_outcome probe_rate(const std::string& node, const probe_limits& limits) {
  address where;
  try {
    where = parse_address(node);
  } catch (const std::exception& e) {
    return failed(e.what());
  }
  auto deadline = clock::now() + limits.timeout;
  // A send the node does not take within half the time fails the probe.
  endpoint ep{limits.timeout / 2, receive_limits{0, defaults::max_control_bytes}};
  std::shared_ptr<transports::tcp::connection> conn;
  try {
    conn = ep.connect(where, limits.timeout / 4);
  } catch (const std::exception& e) {
    return failed(fmt::format("cannot connect to {}: {}", node, e.what()));
  }
  // A small send buffer: what the burst leaves queued when it stops must drain within
  // the timeout even on a slow path (4 MiB at 10 Mbit/s would take 3 s).
  int queue = static_cast<int>(probe_send_buffer);
  ::setsockopt(conn->fd(), SOL_SOCKET, SO_SNDBUF, &queue, sizeof(queue));
  // One zeroed frame's worth, sent again and again: the node discards it anyway.
  static const std::vector<std::byte> filler(defaults::probe_frame_bytes);
  auto start = clock::now();
  uint64_t sent = 0;
  protocol::frame_header h;
  h.kind = protocol::frame_kind::probe;
  while (sent < limits.max_bytes && clock::now() - start < limits.burst) {
    auto n = std::min<uint64_t>(filler.size(), limits.max_bytes - sent);
    h.payload_bytes = static_cast<uint32_t>(n);
    iovec iov{const_cast<std::byte*>(filler.data()), n};
    if (!conn->send(h, &iov, 1))
      return refused(ep, node,
                     fmt::format("{} did not take the probe's bytes: stalled after {} "
                                 "bytes for {} ms",
                                 node, sent, (limits.timeout / 2).count()));
    sent += n;
  }
  h.payload_bytes = 0;
  h.flags = protocol::flag_want_result;
  if (!conn->send(h))
    return refused(
      ep, node,
      fmt::format("{} did not take the probe's last frame after {} bytes", node, sent));
  probe_answer_sink sink;
  while (!sink.answered && clock::now() < deadline)
    ep.poll(10, sink);
  conn->close();
  if (!sink.answered)
    return failed(fmt::format("{} did not acknowledge the probe's {} bytes within {} ms",
                              node, sent, limits.timeout.count()));
  if (!sink.failure.empty())
    return failed(fmt::format("{}: {}", node, sink.failure));
  if (sink.bytes != sent)
    return failed(
      fmt::format("{} acknowledged {} of the probe's {} bytes", node, sink.bytes, sent));
  probe_outcome out;
  out.ok = true;
  out.bytes = sink.bytes;
  out.elapsed_us = static_cast<uint64_t>(std::max<int64_t>(
    1, std::chrono::duration_cast<std::chrono::microseconds>(sink.at - start).count()));
  out.gbps = static_cast<double>(out.bytes) * 8.0
             / (static_cast<double>(out.elapsed_us) * 1e3);
  return out;
}

} // namespace rw::services
