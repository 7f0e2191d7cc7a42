#pragma once
// The node's shared memory endpoint: the segments of every colocated worker it adopted
// (handed over by the TCP poller that received the worker's hello). One thread drains
// their request rings; when there is nothing to do it sleeps on the node doorbell,
// which workers ring after posting requests (a syscall only if it sleeps). It also
// moves completions that waited for room into their workers' rings, and reports a
// worker cut off for not taking them with the reason.

#include <mutex>
#include <vector>

#include "transports/shm/connection.hpp"
#include "transports/transport.hpp"

namespace rw::transports::shm {

class endpoint final : public transports::endpoint {
public:
  /// Creates the node doorbell segment. Throws std::runtime_error. `io_timeout` and
  /// `backlog_bytes` bound what waits for a worker that takes no completions.
  explicit endpoint(std::chrono::milliseconds io_timeout =
                      std::chrono::milliseconds(defaults::io_timeout_ms),
                    uint64_t backlog_bytes = defaults::send_queue_mib << 20);

  /// The doorbell's name, for welcomes.
  const std::string& bell_name() const noexcept { return bell_.name(); }

  void adopt(connection_ptr c) override;
  int poll(int timeout_ms, frame_sink& sink) override;
  void close_all(frame_sink& sink) override;
  size_t connection_count() const noexcept override;
  std::string describe() const override;

private:
  void dispatch(const std::shared_ptr<connection>& c, const request& r, frame_sink& sink);

  std::chrono::milliseconds io_timeout_;
  uint64_t backlog_bytes_;
  mapping bell_;
  mutable std::mutex incoming_mtx_;
  std::vector<std::shared_ptr<connection>> incoming_; // adopted, not yet polled
  std::vector<std::shared_ptr<connection>> conns_;
};

} // namespace rw::transports::shm
