#pragma once
// A test hook of the chunk shard (rw-node --test-delay-answers): the updates of chosen
// tensors are copied and held for a fixed time before they are sent, so that a worker's
// answers arrive out of the order it pushed them (what a job over several nodes or
// shards can do, made certain). Frames of one tensor keep their order (every frame of
// it is held equally long). Nothing here runs unless the node was started with the flag.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "protocol/frame.hpp"
#include "transports/transport.hpp"

namespace rw::actors::detail {

class held_answers {
public:
  using clock_type = std::chrono::steady_clock;

  held_answers() = default;
  explicit held_answers(std::map<uint32_t, std::chrono::milliseconds> delays)
    : delays_(std::move(delays)) {}

  /// Whether any tensor is held (the flag was given).
  bool active() const { return !delays_.empty(); }
  /// How long updates of `tensor` are held (zero: not held).
  std::chrono::milliseconds delay(uint32_t tensor) const {
    auto it = delays_.find(tensor);
    return it == delays_.end() ? std::chrono::milliseconds(0) : it->second;
  }
  /// The shortest delay (how often due() should be asked; zero when none).
  std::chrono::milliseconds shortest() const;

  /// Keeps a copy of `h` and its payload until `now` + delay(h.tensor_id).
  void hold(const transports::connection_ptr& conn, const protocol::frame_header& h,
            const void* payload, size_t bytes, clock_type::time_point now);

  /// Sends every frame due by `now`, oldest first; returns how many were sent (a frame
  /// whose connection has closed is dropped, as an answer sent on it would be).
  size_t send_due(clock_type::time_point now);

  /// Drops what is held for `job_id` (the job ended).
  void drop(uint32_t job_id);

  size_t size() const { return held_.size(); }

private:
  struct frame {
    transports::connection_ptr conn;
    protocol::frame_header header;
    std::vector<std::byte> payload;
    clock_type::time_point due;
  };
  std::map<uint32_t, std::chrono::milliseconds> delays_;
  std::deque<frame> held_; // in due order per tensor; send_due scans them all
};

} // namespace rw::actors::detail
