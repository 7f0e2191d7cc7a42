#include "logic/held_answers.hpp"

#include <algorithm>
#include <cstring>

namespace rw::actors::detail {

std::chrono::milliseconds held_answers::shortest() const {
  auto least = std::chrono::milliseconds(0);
  for (const auto& [tensor, delay] : delays_)
    if (least.count() == 0 || delay < least)
      least = delay;
  return least;
}

void held_answers::hold(const transports::connection_ptr& conn,
                        const protocol::frame_header& h, const void* payload,
                        size_t bytes, clock_type::time_point now) {
  frame f{conn, h, std::vector<std::byte>(bytes), now + delay(h.tensor_id)};
  if (bytes > 0)
    std::memcpy(f.payload.data(), payload, bytes);
  held_.push_back(std::move(f));
}

size_t held_answers::send_due(clock_type::time_point now) {
  size_t sent = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->due > now) {
      ++it;
      continue;
    }
    if (it->payload.empty()) {
      it->conn->send(it->header);
    } else {
      iovec iov{it->payload.data(), it->payload.size()};
      it->conn->send(it->header, &iov, 1);
    }
    ++sent;
    it = held_.erase(it);
  }
  return sent;
}

void held_answers::drop(uint32_t job_id) {
  held_.erase(
    std::remove_if(held_.begin(), held_.end(),
                   [job_id](const frame& f) { return f.header.job_id == job_id; }),
    held_.end());
}

} // namespace rw::actors::detail
