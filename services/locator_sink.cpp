#include "services/locator_sink.hpp"

#include "rackweave/defaults.hpp"
#include "services/tcp_names.hpp"

namespace rw::services {

locator_sink::locator_sink(const protocol::located_msg& answer, std::string refusal,
                           hello_answer on_hello)
  : payload_(encode(answer)), refusal_(std::move(refusal)),
    on_hello_(std::move(on_hello)) {}

payload_target locator_sink::on_header(const connection_ptr& c,
                                       const protocol::frame_header& h) {
  if (h.kind == protocol::frame_kind::locate && h.payload_bytes == 0)
    return payload_target::into(nullptr);
  if (h.kind == protocol::frame_kind::hello && on_hello_ && h.payload_bytes > 0)
    return payload_target::gathered(); // each connection's apart, taken as it arrives
  c->send_error(errc::bad_frame, refusal_, h);
  return payload_target::closing();
}

void locator_sink::on_frame(const connection_ptr& c, const protocol::frame_header& h,
                            payload_target& t) {
  if (h.kind == protocol::frame_kind::hello) {
    protocol::hello_msg hello;
    std::string why;
    if (decode(t.dst, h.payload_bytes, hello, why) != errc::ok) {
      c->send_error(errc::bad_frame, why, h);
    } else {
      auto answer = on_hello_(hello, c->peer());
      c->send_error(answer.code, answer.message, h, answer.candidates);
    }
    if (++hellos_[c->id()] >= defaults::max_stranger_refusals)
      c->close(); // a worker goes where it was sent; asking again and again is not one
    return;
  }
  protocol::frame_header reply;
  reply.kind = protocol::frame_kind::located;
  reply.payload_bytes = static_cast<uint32_t>(payload_.size());
  iovec iov{payload_.data(), payload_.size()};
  c->send(reply, &iov, 1);
  // Answers queue for a peer that may read none: a few per connection, then it goes.
  if (++locates_[c->id()] >= defaults::max_stranger_locates)
    c->close();
}

void locator_sink::on_closed(const connection_ptr& c, errc, const std::string&) {
  hellos_.erase(c->id());
  locates_.erase(c->id());
}

accept_policy locator_policy() {
  accept_policy p;
  p.send_queue_bytes = 1u << 20;
  p.max_per_host = defaults::max_peer_connections;
  p.max_strangers = defaults::max_stranger_connections;
  p.stranger_bytes = std::make_shared<transports::byte_budget>(
    uint64_t{defaults::max_unjoined_mib} << 20);
  return p;
}

} // namespace rw::services
