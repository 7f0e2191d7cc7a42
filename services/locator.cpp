#include "services/locator.hpp"

#include <fmt/format.h>

#include "rackweave/defaults.hpp"
#include "services/locator_sink.hpp"
#include "services/tcp_names.hpp"

namespace rw::services {

namespace {

constexpr receive_limits control_only{0, defaults::max_control_bytes};

// Receives the answer to a locate.
class answer_sink final : public frame_sink {
public:
  payload_target on_header(const connection_ptr&,
                           const protocol::frame_header& h) override {
    if (h.kind != protocol::frame_kind::located && h.kind != protocol::frame_kind::error)
      return payload_target::dropped();
    kind = h.kind;
    buf.resize(h.payload_bytes);
    return payload_target::into(buf.data());
  }
  void on_frame(const connection_ptr&, const protocol::frame_header& h,
                payload_target& t) override {
    if (t.action == payload_target::discard)
      return;
    answered = true;
    std::string why;
    if (h.kind == protocol::frame_kind::located) {
      if (decode(buf.data(), buf.size(), answer, why) != errc::ok)
        failure = "undecodable answer: " + why;
      return;
    }
    protocol::error_msg err;
    failure = decode(buf.data(), buf.size(), err, why) == errc::ok
                ? err.message
                : "undecodable error: " + why;
  }
  void on_closed(const connection_ptr&, errc, const std::string& why) override {
    if (!answered) {
      answered = true;
      failure = "the node closed the connection without answering: " + why;
    }
  }

  protocol::frame_kind kind = protocol::frame_kind::invalid;
  std::vector<std::byte> buf;
  bool answered = false;
  std::string failure;
  protocol::located_msg answer;
};

} // namespace

protocol::located_msg locate(const std::string& node, std::chrono::milliseconds timeout) {
  address where;
  try {
    where = parse_address(node);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  endpoint ep{timeout, control_only};
  std::shared_ptr<transports::tcp::connection> conn;
  try {
    conn = ep.connect(where, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("no node answers at {}: {}", node, e.what()));
  }
  protocol::frame_header h;
  h.kind = protocol::frame_kind::locate;
  if (!conn->send(h))
    throw std::runtime_error(
      fmt::format("cannot ask the node at {} for the coordinator", node));
  answer_sink sink;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!sink.answered && std::chrono::steady_clock::now() < deadline)
    ep.poll(50, sink);
  conn->close();
  if (!sink.answered)
    throw std::runtime_error(
      fmt::format("the node at {} did not say where the coordinator "
                  "is within {} ms",
                  node, timeout.count()));
  if (!sink.failure.empty())
    throw std::runtime_error(fmt::format("the node at {}: {}", node, sink.failure));
  auto coord = parse_address(sink.answer.coordinator);
  if (is_wildcard(coord.host))
    coord.host = where.host;
  sink.answer.coordinator = coord.to_string();
  return sink.answer;
}

locator_service::locator_service(const std::string& listen, protocol::located_msg answer,
                                 std::string refusal, hello_answer on_hello)
  : ep_(std::make_shared<endpoint>(std::chrono::milliseconds(defaults::io_timeout_ms),
                                   control_only, locator_policy())) {
  address_ = ep_->listen(parse_address(listen)).to_string();
  thread_ = std::thread([this, answer = std::move(answer), refusal = std::move(refusal),
                         on_hello = std::move(on_hello)] {
    locator_sink sink{answer, refusal, on_hello};
    while (!stop_.load(std::memory_order_acquire))
      ep_->poll(100, sink);
    ep_->close_all(sink);
  });
}

locator_service::~locator_service() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable())
    thread_.join();
}

} // namespace rw::services
