#pragma once
// Finding the cluster coordinator from any node's address. A client sends a `locate`
// frame to a node's --listen endpoint and gets back a `located` frame naming the
// coordinator's control (middleman) address, or an error frame. Nodes with NIC pollers
// answer on those; a coordinator-only node runs a locator_service on its --listen.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "protocol/control.hpp"
#include "transports/tcp/address.hpp"

namespace rw::transports::tcp {
class endpoint;
} // namespace rw::transports::tcp

namespace rw::services {

/// Asks the node at `node` (HOST:PORT) where the coordinator is, within `timeout`. A
/// node that answers "not yet" (errc::unavailable: started, not yet registered with its
/// coordinator) is asked again every 50 ms within the same timeout; when the deadline
/// cuts a later question short, the error says the node's "not yet" and how often.
/// The answer's host is filled in (from `node`) when the node left it empty or gave a
/// wildcard, and the tenant door's (from the coordinator's) the same way. Throws std::runtime_error with a message fit for the user.
protocol::located_msg locate(const std::string& node, std::chrono::milliseconds timeout);

/// How a locator answers a worker's hello (with an error frame: typically moved, to the
/// job's nodes); given the hello and the worker's HOST:PORT. Runs on the locator's
/// thread, so it must return within a bounded time.
using hello_answer =
  std::function<protocol::error_msg(const protocol::hello_msg&, const std::string& peer)>;

/// Answers `locate` on a listening endpoint with a fixed answer, on its own thread; a
/// hello goes to `on_hello` if given; any other frame is refused with an error frame
/// that says what this endpoint is.
class locator_service {
public:
  /// Binds `listen` at once (throws if it cannot); serves until destroyed.
  locator_service(const std::string& listen, protocol::located_msg answer,
                  std::string refusal, hello_answer on_hello = {});
  ~locator_service();

  locator_service(const locator_service&) = delete;
  locator_service& operator=(const locator_service&) = delete;

  /// The bound address (the real port when asked for port 0).
  const std::string& address() const noexcept { return address_; }

private:
  std::shared_ptr<transports::tcp::endpoint> ep_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace rw::services
