// The 16-bit chunk payloads of bf16 / fp16 jobs (protocol/half.hpp): the first byte
// chooses the flags (bit 0: bf16, bit 1: fp16, both or neither too), the next two the
// chunk's length (1..65536 values), the rest is the payload. A payload is refused or
// widens to finite-or-not floats that narrow back to the same 16-bit values (widening
// is exact), on every conversion path this CPU has.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "protocol/frame.hpp"
#include "protocol/half.hpp"
#include "runtime/compression.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace pr = rw::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3)
    return 0;
  uint16_t flag = uint16_t((data[0] & 1) ? pr::flag_bf16 : 0)
                  | uint16_t((data[0] & 2) ? pr::flag_fp16 : 0);
  size_t length = (size_t(data[1]) | size_t(data[2]) << 8) + 1;
  // An aligned copy, as the receivers' buffers are.
  std::vector<std::byte> payload(size - 3);
  if (!payload.empty())
    std::memcpy(payload.data(), data + 3, payload.size());
  std::vector<float> out(length);
  auto why = pr::widen_half(flag, payload.data(), payload.size(), out.data(), length);
  bool one_flag = flag == pr::flag_bf16 || flag == pr::flag_fp16;
  bool sized = one_flag && payload.size() == pr::half_payload_bytes(flag, length);
  if (!sized && why.empty())
    rw::fuzz::fail("widen_half accepted a payload of the wrong size or flags");
  if (!why.empty())
    return 0;
  // Exact widening: each value narrows back to itself (NaNs aside, which come back
  // quiet), on every path.
  const size_t offset = flag == pr::flag_fp16 ? sizeof(float) : 0;
  float scale = 1.0f;
  if (flag == pr::flag_fp16)
    std::memcpy(&scale, payload.data(), sizeof scale);
  for (const auto& isa : rw::runtime::compression_isas()) {
    rw::runtime::select_compression(isa);
    std::vector<float> again(length);
    if (!pr::widen_half(flag, payload.data(), payload.size(), again.data(), length)
           .empty()
        || std::memcmp(again.data(), out.data(), length * sizeof(float)) != 0)
      rw::fuzz::fail("conversion paths disagree on a payload: " + isa);
  }
  rw::runtime::select_compression("auto");
  for (size_t i = 0; i < length; ++i) {
    uint16_t h;
    std::memcpy(&h, payload.data() + offset + 2 * i, sizeof h);
    bool nan = flag == pr::flag_bf16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0
                                     : (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan)
      continue;
    float v = out[i];
    uint16_t back = flag == pr::flag_bf16 ? rw::runtime::to_bf16(v)
                                          : rw::runtime::to_fp16(v * (1.0f / scale));
    // fp16 values times a scale can leave float32's range (or its normals, down to
    // zero): only a normal product, or a zero from a zero, is expected to come back.
    bool exact_range = flag == pr::flag_bf16 || std::isnormal(v) || (h & 0x7fff) == 0;
    if (flag == pr::flag_bf16 && (h & 0x7f80) == 0 && (h & 0x7f) != 0)
      continue; // a bf16 subnormal widens exactly, but narrowing flushes it to zero
    if (exact_range && back != h
        && !(v == 0.0f && (back & 0x7fff) == 0 && (h & 0x7fff) == 0))
      rw::fuzz::fail("a 16-bit value did not survive widening and narrowing");
  }
  return 0;
}
