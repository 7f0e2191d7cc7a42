#include "transports/shm/endpoint.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::transports::shm {

namespace {
constexpr int max_requests_per_round = 4096; // then give the other workers a turn
}

endpoint::endpoint(std::chrono::milliseconds io_timeout, uint64_t backlog_bytes)
  : io_timeout_(io_timeout), backlog_bytes_(backlog_bytes),
    bell_((remove_stale_segments(), create_node_bell())) {}

void endpoint::adopt(connection_ptr c) {
  auto shm = std::dynamic_pointer_cast<connection>(c);
  if (!shm)
    throw std::logic_error("the shm endpoint adopts shm connections only");
  shm->set_send_limits(io_timeout_, backlog_bytes_);
  {
    std::lock_guard<std::mutex> guard{incoming_mtx_};
    incoming_.push_back(std::move(shm));
  }
  ring(bell_.as<node_bell_segment>()->bell);
}

size_t endpoint::connection_count() const noexcept {
  std::lock_guard<std::mutex> guard{incoming_mtx_};
  return conns_.size() + incoming_.size();
}

std::string endpoint::describe() const {
  return "shm://" + bell_.name();
}

void endpoint::dispatch(const std::shared_ptr<connection>& c, const request& r,
                        frame_sink& sink) {
  protocol::frame_header h;
  h.kind = static_cast<protocol::frame_kind>(r.kind);
  h.flags = r.flags;
  h.job_id = c->job_id();
  h.rank = c->rank();
  h.tensor_id = r.tensor;
  h.chunk_index = r.chunk;
  h.clock = r.clock;
  runtime::buffer_ref payload;
  if (h.kind == protocol::frame_kind::push || h.kind == protocol::frame_kind::init) {
    uint32_t bytes = 0;
    auto* data = c->gradient(r.tensor, r.chunk, bytes);
    if (data != nullptr) {
      bool notify = (r.flags & protocol::flag_want_result) == 0;
      payload.reset(new view(c, data, bytes, r.tensor, r.chunk, r.clock, notify));
      h.payload_bytes = bytes;
    }
  } else if (h.kind != protocol::frame_kind::pull) {
    h.kind = protocol::frame_kind::invalid; // only push, init and pull travel on the ring
  }
  sink.on_resident_frame(c, h, std::move(payload));
}

int endpoint::poll(int timeout_ms, frame_sink& sink) {
  {
    std::lock_guard<std::mutex> guard{incoming_mtx_};
    conns_.insert(conns_.end(), incoming_.begin(), incoming_.end());
    incoming_.clear();
  }
  int handled = 0;
  std::stable_sort(conns_.begin(), conns_.end(), [&](auto& a, auto& b) {
    return sink.priority(a) < sink.priority(b); // the furthest behind first
  });
  for (auto& c : conns_) {
    if (c->has_backlog())
      c->flush_backlog();
    request r;
    for (int n = 0; n < max_requests_per_round && c->is_open() && c->next_request(r);
         ++n) {
      dispatch(c, r, sink);
      ++handled;
    }
  }
  for (auto& c : conns_)
    if (!c->is_open() && !c->reported) {
      c->reported = true;
      auto [code, why] = c->close_reason();
      if (code != errc::ok)
        sink.on_closed(c, code, why);
      else
        sink.on_closed(c, errc::ok, "shared memory released");
    }
  conns_.erase(
    std::remove_if(conns_.begin(), conns_.end(), [](auto& c) { return c->reported; }),
    conns_.end());
  if (handled == 0 && timeout_ms > 0) {
    wait(bell_.as<node_bell_segment>()->bell, timeout_ms, [&] {
      std::lock_guard<std::mutex> guard{incoming_mtx_};
      if (!incoming_.empty())
        return true;
      return std::any_of(conns_.begin(), conns_.end(), [](auto& c) {
        return c->has_requests() || !c->is_open() || c->backlog_fits();
      });
    });
  }
  return handled;
}

void endpoint::close_all(frame_sink& sink) {
  {
    std::lock_guard<std::mutex> guard{incoming_mtx_};
    conns_.insert(conns_.end(), incoming_.begin(), incoming_.end());
    incoming_.clear();
  }
  for (auto& c : conns_) {
    c->close();
    if (!c->reported) {
      c->reported = true;
      sink.on_closed(c, errc::io_error, "endpoint shut down");
    }
  }
  conns_.clear();
}

} // namespace rw::transports::shm
