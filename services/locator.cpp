#include "services/locator.hpp"

#include <algorithm>
#include <thread>

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
    if (decode(buf.data(), buf.size(), err, why) == errc::ok) {
      failure = err.message;
      code = err.code;
    } else {
      failure = "undecodable error: " + why;
    }
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
  errc code = errc::internal; // of an error frame
  protocol::located_msg answer;
};

constexpr auto locate_retry_gap = std::chrono::milliseconds(50);

// One question on a connection (and endpoint) of its own, answered or not by
// `deadline`.
void ask_once(const address& where, const std::string& node,
              std::chrono::steady_clock::time_point deadline, answer_sink& sink) {
  auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline - std::chrono::steady_clock::now()),
                       std::chrono::milliseconds(1));
  endpoint ep{left, control_only};
  std::shared_ptr<transports::tcp::connection> conn;
  try {
    conn = ep.connect(where, left);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("no node answers at {}: {}", node, e.what()));
  }
  protocol::frame_header h;
  h.kind = protocol::frame_kind::locate;
  if (!conn->send(h))
    throw std::runtime_error(
      fmt::format("cannot ask the node at {} for the coordinator", node));
  while (!sink.answered && std::chrono::steady_clock::now() < deadline)
    ep.poll(50, sink);
  conn->close();
}

} // namespace

protocol::located_msg locate(const std::string& node, std::chrono::milliseconds timeout) {
  address where;
  try {
    where = parse_address(node);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  auto started = std::chrono::steady_clock::now();
  auto deadline = started + timeout;
  bool answered = false;
  std::string failure;
  protocol::located_msg answer;
  int asked = 0;
  for (;;) {
    answer_sink sink;
    ask_once(where, node, deadline, sink);
    // A question the deadline cut short after the node had already said "not yet"
    // leaves that answer standing: the node did answer, and "not yet" is the truth
    // an operator needs (it once read "did not say where" under load).
    if (!sink.answered && answered)
      break;
    ++asked;
    answered = sink.answered;
    failure = std::move(sink.failure);
    answer = std::move(sink.answer);
    // "Not yet" (a node that has not registered with its coordinator since it
    // started): asked again, within the same timeout, as a client would by hand.
    if (!answered || failure.empty() || sink.code != errc::unavailable
        || std::chrono::steady_clock::now() + locate_retry_gap >= deadline)
      break;
    std::this_thread::sleep_for(locate_retry_gap);
  }
  if (!answered)
    throw std::runtime_error(
      fmt::format("the node at {} did not say where the coordinator "
                  "is within {} ms",
                  node, timeout.count()));
  if (!failure.empty())
    throw std::runtime_error(
      asked > 1 ? fmt::format("the node at {}: {} (still after {} tries in {} ms)", node,
                              failure, asked,
                              std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - started)
                                .count())
                : fmt::format("the node at {}: {}", node, failure));
  auto coord = parse_address(answer.coordinator);
  if (is_wildcard(coord.host))
    coord.host = where.host;
  answer.coordinator = coord.to_string();
  if (!answer.tenant_door.empty()) {
    auto door = parse_address(answer.tenant_door);
    if (is_wildcard(door.host))
      door.host = coord.host; // the door is on the coordinator's host
    answer.tenant_door = door.to_string();
  }
  return answer;
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
