// A tensor's optimizer state, read or loaded: the worker's side of the `state` frames
// (protocol/frame.hpp). The caller sends, then waits; the receiver thread lands each
// answer in the connection's landing buffer and copies it into the caller's memory
// under the call's mutex, so an answer that comes after the call gave up (a timeout)
// touches nothing of the caller's.

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "worker/link.hpp"

namespace rw::actors {

using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

uint32_t worker_link::state_wait::slot_of(uint32_t array) const noexcept {
  if (array == protocol::state_version_only)
    return load ? arrays : (arrays == 0 ? 0 : UINT32_MAX);
  return array < arrays ? array : UINT32_MAX;
}

std::vector<uint64_t> worker_link::request_state(uint32_t tensor, uint32_t arrays,
                                                 float* dst, const float* src,
                                                 uint64_t clock,
                                                 std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> one{state_call_};
  control_call awaiting{*this};
  const auto& layout = this->layout(tensor);
  const uint32_t count = layout.count();
  {
    std::lock_guard<std::mutex> guard{state_mtx_};
    state_wait w;
    w.tensor = tensor;
    // Answers to an earlier call that gave up are not this one's; the top bit keeps the
    // tag apart from the ring versions other frames' errors carry in the same field.
    w.tag = 0x80000000u | (++state_tags_ & 0x7FFFFFFFu);
    w.arrays = arrays;
    w.load = src != nullptr;
    w.dst = dst;
    w.got.assign(size_t{count} * w.slots(), 0);
    w.versions.assign(count, UINT64_MAX);
    w.left = w.got.size();
    state_.emplace(std::move(w));
  }
  struct done_with_call { // the call ends however it ends
    worker_link& link;
    ~done_with_call() {
      std::lock_guard<std::mutex> guard{link.state_mtx_};
      link.state_.reset();
    }
  } ends{*this};
  const bool load = src != nullptr;
  frame_header h;
  h.kind = frame_kind::state;
  h.flags = load ? protocol::flag_state_load : uint16_t{0};
  h.job_id = job_id_;
  h.rank = rank_;
  h.tensor_id = tensor;
  h.clock = load ? clock : 0;
  uint32_t slots = 0;
  {
    std::lock_guard<std::mutex> guard{state_mtx_};
    h.ring = state_->tag;
    slots = state_->slots();
  }
  const auto routes = this->routes();
  const auto list = conns();
  for (uint32_t c = 0; c < count; ++c) {
    auto e = routes->connection_of(tensor, c);
    if (closed() || list->empty())
      break;
    auto& conn = e < list->size() ? (*list)[e] : list->front();
    h.chunk_index = c;
    for (uint32_t s = 0; s < slots; ++s) {
      const bool an_array = s < arrays;
      h.staleness = an_array ? s : protocol::state_version_only;
      h.payload_bytes = 0;
      iovec iov{nullptr, 0};
      if (load && an_array) {
        h.payload_bytes = layout.length(c) * static_cast<uint32_t>(sizeof(float));
        iov = {const_cast<float*>(src + uint64_t{s} * layout.elements + layout.offset(c)),
               h.payload_bytes};
      }
      if (!conn->send(h, &iov, iov.iov_len > 0 ? 1 : 0))
        throw rw::error(errc::io_error, "cannot send the optimizer-state request: the "
                                        "worker's connection to its node is closed");
      count_sent(protocol::frame_header_bytes + h.payload_bytes);
    }
  }
  std::unique_lock<std::mutex> guard{state_mtx_};
  auto& w = *state_;
  // Refused chunks count as answered: every frame of the call is answered before it
  // ends, so none comes after it (the tag drops those of a call that timed out).
  if (!state_cv_.wait_for(guard, timeout, [&] { return w.left == 0 || closed(); }))
    throw rw::error(
      errc::timeout,
      fmt::format("{} of the optimizer state of tensor {}: {} of {} answers "
                  "within {} ms",
                  load ? "load" : "read", tensor, w.got.size() - w.left, w.got.size(),
                  timeout.count()));
  if (w.error)
    throw rw::error(w.error->first, w.error->second);
  if (w.left != 0)
    throw rw::error(errc::io_error, "the worker's connection closed before the node "
                                    "answered the optimizer-state request");
  return w.versions;
}

payload_target worker_link::on_state_header(const transports::connection_ptr& c,
                                            const frame_header& h) {
  wire_received_.fetch_add(protocol::frame_header_bytes + h.payload_bytes,
                           std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{state_mtx_};
  auto slot = state_ ? state_->slot_of(h.staleness) : UINT32_MAX;
  if (!state_ || h.tensor_id != state_->tensor || h.ring != state_->tag
      || slot == UINT32_MAX || h.chunk_index >= layout(h.tensor_id).count()) {
    spdlog::debug("worker rank {}: a state frame no call awaits (tensor {} chunk {}); "
                  "dropped",
                  rank_, h.tensor_id, h.chunk_index);
    return payload_target::dropped();
  }
  const bool carries = !state_->load && h.staleness != protocol::state_version_only;
  const uint32_t want = carries ? layout(h.tensor_id).length(h.chunk_index)
                                    * uint32_t{sizeof(float)}
                                : 0;
  if (h.payload_bytes != want) {
    spdlog::error(
      "worker rank {}: node sent {} bytes of optimizer state for chunk {}/{}, "
      "not {}",
      rank_, h.payload_bytes, h.tensor_id, h.chunk_index, want);
    return payload_target::dropped();
  }
  auto& buf = landing_.of(c).bytes;
  buf.resize(want);
  return payload_target::into(want == 0 ? nullptr : buf.data());
}

void worker_link::on_state_frame(const transports::connection_ptr& c,
                                 const frame_header& h) {
  std::lock_guard<std::mutex> guard{state_mtx_};
  if (!state_ || h.tensor_id != state_->tensor || h.ring != state_->tag)
    return; // the call gave up meanwhile
  auto& w = *state_;
  const auto slot = w.slot_of(h.staleness);
  const auto at = size_t{h.chunk_index} * w.slots() + slot;
  if (slot == UINT32_MAX || at >= w.got.size() || w.got[at] != 0)
    return; // not this call's, or a repeat
  const auto& layout = this->layout(h.tensor_id);
  if (!w.load) {
    auto& seen = w.versions[h.chunk_index];
    if (seen != UINT64_MAX && seen != h.clock) {
      if (!w.error)
        w.error.emplace(errc::clock_out_of_range,
                        fmt::format("chunk {}/{} moved from version {} to {} while its "
                                    "optimizer state was read: read it between steps",
                                    h.tensor_id, h.chunk_index, seen, h.clock));
    }
    seen = std::max(seen == UINT64_MAX ? 0 : seen, h.clock);
    if (h.payload_bytes > 0)
      std::memcpy(w.dst + uint64_t{h.staleness} * layout.elements
                    + layout.offset(h.chunk_index),
                  landing_.of(c).bytes.data(), h.payload_bytes);
  }
  w.got[at] = 1;
  if (--w.left == 0)
    state_cv_.notify_all();
}

bool worker_link::on_state_error(const frame_header& h, errc code,
                                 const std::string& why) {
  std::lock_guard<std::mutex> guard{state_mtx_};
  if (!state_ || h.tensor_id != state_->tensor || h.ring != state_->tag)
    return false;
  auto& w = *state_;
  const auto slot = w.slot_of(h.staleness);
  const auto at = size_t{h.chunk_index} * w.slots() + slot;
  if (slot == UINT32_MAX || at >= w.got.size() || w.got[at] != 0)
    return true; // this call's, about a frame answered already
  if (!w.error)
    w.error.emplace(code, why);
  w.got[at] = 1;
  if (--w.left == 0)
    state_cv_.notify_all();
  return true;
}

} // namespace rw::actors
