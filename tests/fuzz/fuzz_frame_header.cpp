// The frame header decoder (protocol/frame.hpp) over any 64 bytes: it decodes or says
// why not; what decodes encodes back to a header that decodes to the same fields.

#include <cstdint>
#include <cstring>
#include <string>

#include "protocol/frame.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace pr = rw::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alignas(8) std::byte in[pr::frame_header_bytes] = {};
  std::memcpy(in, data, size < sizeof in ? size : sizeof in);
  pr::frame_header h;
  std::string why;
  if (pr::decode(in, h, why) != rw::errc::ok) {
    if (why.empty())
      rw::fuzz::fail("a refused header comes without a reason");
    return 0;
  }
  alignas(8) std::byte out[pr::frame_header_bytes];
  pr::encode(h, out);
  pr::frame_header again;
  if (pr::decode(out, again, why) != rw::errc::ok)
    rw::fuzz::fail("a decoded header does not decode once encoded: " + why);
  if (again.kind != h.kind || again.flags != h.flags || again.error_code != h.error_code
      || again.job_id != h.job_id || again.rank != h.rank
      || again.tensor_id != h.tensor_id || again.chunk_index != h.chunk_index
      || again.payload_bytes != h.payload_bytes || again.clock != h.clock
      || again.staleness != h.staleness || again.ring != h.ring)
    rw::fuzz::fail("a header's fields change through encode and decode");
  return 0;
}
