// Results in place (connection.hpp): the buffers a worker names for its tensors'
// results, and where the node writes an update's payload for them.

#include "transports/fabric/connection.hpp"

#include <rdma/fi_rma.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rw::transports::fabric {

bool connection::target_of(const protocol::frame_header& h, uint64_t bytes,
                           fi_rma_iov& out) {
  // 16-bit results are widened by the receiver: they travel through the slots.
  if (h.kind != protocol::frame_kind::update
      || (h.flags & (protocol::flag_subscribe | protocol::flag_half)) != 0
      || core_->place_mode == placement::off)
    return false;
  std::lock_guard<std::mutex> guard{place_mtx_};
  if (h.tensor_id >= remote_places_.size())
    return false;
  auto& p = remote_places_[h.tensor_id];
  auto offset = uint64_t{h.chunk_index} * p.chunk_bytes;
  if (p.bytes == 0 || offset + bytes > p.bytes)
    return false;
  out = {p.address + offset, bytes, p.key};
  return true;
}

bool connection::place_results(uint32_t tensor, float* dst, uint64_t bytes,
                               uint32_t chunk_bytes) {
  if (core_->place_mode == placement::off || dst == nullptr || bytes == 0
      || chunk_bytes == 0 || tensor >= max_placed_tensors)
    return true; // results travel through the slots
  auto* base = reinterpret_cast<std::byte*>(dst);
  {
    std::lock_guard<std::mutex> guard{place_mtx_};
    if (tensor < local_places_.size() && local_places_[tensor].base == base
        && local_places_[tensor].bytes == bytes)
      return true; // the node knows this buffer already
  }
  std::shared_ptr<region> reg;
  try {
    reg = core_->target_memory->get(base, bytes);
  } catch (const rw::error& e) { // not registrable: results come through the slots
    spdlog::warn("fabric: peer={}: results of tensor {} go through slots: {}", peer_,
                 tensor, e.what());
    return true;
  }
  protocol::fabric_place p;
  p.tensor = tensor;
  p.address = reg->remote_address(base);
  p.key = reg->key();
  p.bytes = bytes;
  p.chunk_bytes = chunk_bytes;
  {
    std::lock_guard<std::mutex> guard{place_mtx_};
    if (local_places_.size() <= tensor)
      local_places_.resize(tensor + 1);
    local_places_[tensor] = {std::move(reg), base, bytes, chunk_bytes};
  }
  auto payload = encode(p);
  protocol::frame_header h;
  h.kind = protocol::frame_kind::place;
  h.tensor_id = tensor;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{payload.data(), payload.size()};
  return send(h, &iov, 1);
}

bool connection::set_place(const protocol::fabric_place& p, std::string& why) {
  if (p.tensor >= max_placed_tensors) {
    why = fmt::format("a place for tensor {} (at most {} tensors)", p.tensor,
                      max_placed_tensors);
    return false;
  }
  std::lock_guard<std::mutex> guard{place_mtx_};
  if (remote_places_.size() <= p.tensor)
    remote_places_.resize(p.tensor + 1);
  remote_places_[p.tensor] = {p.address, p.key, p.bytes, p.chunk_bytes};
  return true;
}

bool connection::placing(uint32_t tensor) const {
  std::lock_guard<std::mutex> guard{place_mtx_};
  return tensor < remote_places_.size() && remote_places_[tensor].bytes > 0;
}

std::byte* connection::placed_at(const protocol::frame_header& h,
                                 std::string& why) const {
  std::lock_guard<std::mutex> guard{place_mtx_};
  if (h.tensor_id >= local_places_.size() || local_places_[h.tensor_id].base == nullptr) {
    why = fmt::format("a placed {} frame for tensor {}, which has no output buffer here",
                      to_string(h.kind), h.tensor_id);
    return nullptr;
  }
  auto& p = local_places_[h.tensor_id];
  auto offset = uint64_t{h.chunk_index} * p.chunk_bytes;
  if (offset + h.payload_bytes > p.bytes) {
    why = fmt::format(
      "a placed frame for chunk {}/{} ({} bytes) outside its {}-byte buffer", h.tensor_id,
      h.chunk_index, h.payload_bytes, p.bytes);
    return nullptr;
  }
  return p.base + offset;
}

} // namespace rw::transports::fabric
