#include "transports/transport.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "protocol/control.hpp"

namespace rw::transports {

namespace {
std::atomic<uint64_t> next_connection_id{1};
} // namespace

connection::connection() : id_(next_connection_id.fetch_add(1)) {}

bool connection::send_batch(const protocol::frame_header* headers, const iovec* payloads,
                            int n) {
  for (int i = 0; i < n; ++i)
    if (!send(headers[i], payloads[i].iov_len > 0 ? &payloads[i] : nullptr,
              payloads[i].iov_len > 0 ? 1 : 0))
      return false;
  return true;
}

bool connection::send_error(errc code, const std::string& message,
                            const protocol::frame_header& about,
                            const std::vector<std::string>& candidates) {
  auto payload = encode(protocol::error_msg{code, message, candidates});
  protocol::frame_header h = about;
  h.kind = protocol::frame_kind::error;
  h.flags = 0;
  h.error_code = code;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{payload.data(), payload.size()};
  return send(h, &iov, 1);
}

} // namespace rw::transports

namespace rw::transports {

void endpoint::adopt(connection_ptr) {
  throw std::logic_error("this endpoint cannot adopt connections (" + describe() + ")");
}

void frame_sink::on_resident_frame(const connection_ptr& c,
                                   const protocol::frame_header& h,
                                   runtime::buffer_ref payload) {
  auto t = on_header(c, h);
  std::vector<std::byte> gathered;
  if (t.action == payload_target::gather) {
    // Already in memory, bounded by the transport's slot or ring: a copy of the sink's
    // own, as a TCP connection would have gathered it.
    if (payload)
      gathered.assign(payload->bytes(),
                      payload->bytes()
                        + std::min<size_t>(h.payload_bytes, payload->size));
    gathered.resize(h.payload_bytes);
    t.dst = gathered.data();
  }
  // A payload already where the sink wants it (placed by the sender) is not copied.
  if (t.action == payload_target::receive && t.dst != nullptr && payload
      && t.dst != payload->bytes())
    std::memcpy(t.dst, payload->bytes(),
                std::min<size_t>(h.payload_bytes, payload->size));
  if (t.action != payload_target::close)
    on_frame(c, h, t);
}

} // namespace rw::transports
