#include "actors/links/fabric_join.hpp"

#include <fmt/format.h>

namespace rw::actors::detail {

namespace {
using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

// The largest frame a node sends a worker besides updates: errors, hyper answers,
// reroutes (the worker takes up to 64 KiB of those).
constexpr uint32_t control_room = 64 * 1024;

// The node's answer to the offer: a `fabric` frame or an error, on the TCP connection.
class answer_sink final : public transports::frame_sink {
public:
  explicit answer_sink(transports::connection_ptr tcp) : tcp_(std::move(tcp)) {}
  payload_target on_header(const transports::connection_ptr& c,
                           const frame_header& h) override {
    if (c != tcp_ || (h.kind != frame_kind::fabric && h.kind != frame_kind::error)
        || h.payload_bytes > control_room)
      return payload_target::dropped();
    buf_.resize(h.payload_bytes);
    return payload_target::into(buf_.data());
  }
  void on_frame(const transports::connection_ptr& c, const frame_header& h,
                payload_target& t) override {
    if (t.action == payload_target::discard || c != tcp_)
      return;
    std::string why;
    answered = true;
    if (h.kind == frame_kind::fabric) {
      if (decode(buf_.data(), buf_.size(), offer, why) == errc::ok) {
        ok = true;
      } else {
        code = errc::bad_frame;
        message = "the node's fabric offer does not decode: " + why;
      }
      return;
    }
    protocol::error_msg err;
    if (decode(buf_.data(), buf_.size(), err, why) != errc::ok)
      err = {errc::bad_frame, "undecodable error frame: " + why, {}};
    code = err.code;
    message = err.message;
  }
  void on_closed(const transports::connection_ptr& c, errc,
                 const std::string& why) override {
    if (c == tcp_ && !answered) {
      answered = true;
      code = errc::io_error;
      message = "the node closed the connection: " + why;
    }
  }

  bool answered = false;
  bool ok = false;
  errc code = errc::ok;
  std::string message;
  protocol::fabric_offer offer;

private:
  transports::connection_ptr tcp_;
  std::vector<std::byte> buf_;
};
} // namespace

fabric_link join_fabric(transports::tcp::endpoint& ep,
                        const transports::connection_ptr& tcp,
                        const protocol::welcome_msg& welcome, const join_request& req) {
  if (welcome.fabric.empty())
    throw rw::error(
      errc::unavailable,
      fmt::format("the node at {} offers no fabric endpoint for this job (it "
                  "runs without --fabric, or the job spans several nodes)",
                  req.connect));
  fabric_link link;
  transports::fabric::endpoint_settings es;
  es.io_timeout_ms = static_cast<int>(
    std::min<int64_t>(req.request_timeout.count(), defaults::io_timeout_ms));
  auto max_payload = std::max<uint32_t>(req.job.chunk_bytes, control_room);
  link.ep = std::make_shared<transports::fabric::endpoint>(
    transports::fabric::domain::open(welcome.fabric), es, max_payload);
  link.conn = link.ep->open("node " + req.connect + " (fabric)", max_payload);
  auto payload = protocol::encode(link.conn->offer());
  frame_header h;
  h.kind = frame_kind::fabric;
  h.job_id = welcome.job_id;
  h.rank = req.rank;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{payload.data(), payload.size()};
  if (!tcp->send(h, &iov, 1))
    throw rw::error(errc::io_error, "cannot send the fabric offer to " + req.connect);
  answer_sink sink{tcp};
  auto deadline = std::chrono::steady_clock::now() + req.request_timeout;
  while (!sink.answered && std::chrono::steady_clock::now() < deadline)
    ep.poll(50, sink);
  if (!sink.answered)
    throw rw::error(errc::timeout,
                    fmt::format("no answer to the fabric offer from {} within "
                                "{} ms",
                                req.connect, req.request_timeout.count()));
  if (!sink.ok)
    throw rw::error(sink.code, sink.message);
  link.conn->bind(sink.offer);
  link.ep->adopt(link.conn);
  return link;
}

} // namespace rw::actors::detail
