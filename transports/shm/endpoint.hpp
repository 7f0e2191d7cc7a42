#pragma once
// The node's shared memory endpoint: the segments of every colocated worker it adopted
// (handed over by the TCP poller that received the worker's hello). One thread drains
// their request rings; when there is nothing to do it sleeps on the node doorbell,
// which workers ring after posting requests (a syscall only if it sleeps).

#include <mutex>
#include <vector>

#include "transports/shm/connection.hpp"
#include "transports/transport.hpp"

namespace rw::transports::shm {

class endpoint final : public transports::endpoint {
public:
  /// Creates the node doorbell segment. Throws std::runtime_error.
  endpoint();

  /// The doorbell's name, for welcomes.
  const std::string& bell_name() const noexcept {
    return bell_.name();
  }

  void adopt(connection_ptr c) override;
  int poll(int timeout_ms, frame_sink& sink) override;
  void close_all(frame_sink& sink) override;
  size_t connection_count() const noexcept override;
  std::string describe() const override;

private:
  void dispatch(const std::shared_ptr<connection>& c, const request& r, frame_sink& sink);

  mapping bell_;
  mutable std::mutex incoming_mtx_;
  std::vector<std::shared_ptr<connection>> incoming_; // adopted, not yet polled
  std::vector<std::shared_ptr<connection>> conns_;
};

} // namespace rw::transports::shm
