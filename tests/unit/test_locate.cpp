// Asking a node where the coordinator is (services::locate): a node that says "not yet"
// is asked again within the timeout, and what it said stands when a later question is
// cut short by the deadline (CI once read "did not say where the coordinator is" from a
// node that had said "not yet" five times, under load).

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "services/locator.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw_unit_locate {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;

namespace {

// Answers the first `answered` locate questions with "not yet", then none at all.
struct not_yet_sink final : frame_sink {
  int answered = 0;
  int asked = 0;
  payload_target on_header(const connection_ptr&, const frame_header&) override {
    return payload_target::dropped();
  }
  void on_frame(const connection_ptr& c, const frame_header& h,
                payload_target&) override {
    if (h.kind != frame_kind::locate)
      return;
    if (asked++ < answered)
      c->send_error(errc::unavailable, "not reached its coordinator yet", h);
  }
  void on_closed(const connection_ptr&, errc, const std::string&) override {}
};

// A fake node on 127.0.0.1, polled on its own thread until destroyed.
class fake_node {
public:
  explicit fake_node(int answered)
    : ep_(std::chrono::milliseconds(2000), receive_limits{0, 1u << 16},
          tcp::accept_policy{1u << 16}) {
    sink_.answered = answered;
    address_ = ep_.listen(tcp::parse_address("127.0.0.1:0")).to_string();
    thread_ = std::thread([this] {
      while (!stop_.load())
        ep_.poll(20, sink_);
    });
  }
  ~fake_node() {
    stop_.store(true);
    thread_.join();
  }
  const std::string& address() const { return address_; }

private:
  tcp::endpoint ep_;
  not_yet_sink sink_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string locate_error(const std::string& at, int ms) {
  try {
    services::locate(at, std::chrono::milliseconds(ms));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace

TEST_CASE("locate: a node's \"not yet\" stands when the deadline cuts a later question "
          "short",
          "[locate]") {
  fake_node node{3}; // "not yet" three times, then silence until the deadline
  auto err = locate_error(node.address(), 800);
  INFO(err);
  CHECK_THAT(err, Catch::Contains("not reached its coordinator yet")
                    && Catch::Contains("still after 3 tries in"));
  CHECK_THAT(err, !Catch::Contains("did not say where"));
}

TEST_CASE("locate: a node that never answers is named as one that did not say",
          "[locate]") {
  fake_node node{0};
  auto err = locate_error(node.address(), 300);
  INFO(err);
  CHECK_THAT(err, Catch::Contains("did not say where the coordinator is within 300 ms"));
}

} // namespace rw_unit_locate
