#pragma once
// What a locator endpoint (locator_service: a coordinator-only node's --listen) does
// with its peers' frames: answers `locate` with the coordinator's address, a hello
// with the handler's answer (typically: moved, to the job's nodes), and refuses anything
// else, closing. Every peer here is a stranger: hellos are gathered per connection as
// they arrive (transports::payload_target::gathered), and a connection answered
// defaults::max_stranger_refusals hellos is closed.

#include <string>
#include <unordered_map>

#include "services/locator.hpp"
#include "transports/tcp/endpoint.hpp"
#include "transports/transport.hpp"

namespace rw::services {

class locator_sink final : public transports::frame_sink {
public:
  locator_sink(const protocol::located_msg& answer, std::string refusal,
               hello_answer on_hello);

  transports::payload_target on_header(const transports::connection_ptr& c,
                                       const protocol::frame_header& h) override;
  void on_frame(const transports::connection_ptr& c, const protocol::frame_header& h,
                transports::payload_target& t) override;
  void on_closed(const transports::connection_ptr& c, errc code,
                 const std::string& why) override;

private:
  protocol::bytes payload_;
  std::string refusal_;
  hello_answer on_hello_;
  std::unordered_map<uint64_t, uint32_t> hellos_;  // answered, by connection id
  std::unordered_map<uint64_t, uint32_t> locates_; // answered, by connection id
};

/// How a locator endpoint accepts: it serves strangers only, so answers are queued,
/// never waited for (a peer that reads nothing is cut off), connections are capped per
/// host and in all, and what their hellos hold is bounded.
transports::tcp::accept_policy locator_policy();

} // namespace rw::services
