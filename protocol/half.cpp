#include "protocol/half.hpp"

#include <cstring>

#include <fmt/format.h>

#include "protocol/frame.hpp"
#include "runtime/compression.hpp"

namespace rw::protocol {

namespace {

constexpr size_t scale_bytes = sizeof(float);

// A normal, positive power of two: multiplying by it (or by its inverse, also one) is
// exact, so the scale never rounds anything twice.
bool is_power_of_two_scale(float s) {
  uint32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  uint32_t exponent = bits >> 23; // the sign bit is in here: it must be 0
  return (bits & 0x7fffffu) == 0 && exponent >= 1 && exponent <= 254;
}

} // namespace

uint16_t half_flag(const compression_spec& c) noexcept {
  switch (c.kind) {
    case compression_spec::bf16: return flag_bf16;
    case compression_spec::fp16: return flag_fp16;
    default: return 0;
  }
}

size_t half_payload_bytes(uint16_t flag, size_t length) noexcept {
  return length * sizeof(uint16_t) + (flag == flag_fp16 ? scale_bytes : 0);
}

void narrow_half(uint16_t flag, const float* in, size_t length, std::byte* out) noexcept {
  // The values go through an aligned view where the payload allows it (it always does
  // for the buffers this code makes: pool buffers and vectors).
  if (flag == flag_bf16) {
    runtime::pack_bf16(in, reinterpret_cast<uint16_t*>(out), length);
    return;
  }
  float scale = runtime::fp16_scale(in, length);
  std::memcpy(out, &scale, scale_bytes);
  runtime::pack_fp16(in, scale, reinterpret_cast<uint16_t*>(out + scale_bytes), length);
}

std::string widen_half(uint16_t flag, const std::byte* payload, size_t bytes, float* out,
                       size_t length) {
  if (flag != flag_bf16 && flag != flag_fp16)
    return fmt::format("flags 0x{:x}: exactly one of bf16 (0x{:x}) and fp16 (0x{:x}) "
                       "says how a 16-bit chunk is encoded",
                       flag, flag_bf16, flag_fp16);
  auto expect = half_payload_bytes(flag, length);
  if (bytes != expect)
    return fmt::format("{} bytes: a {} chunk of {} values is {} bytes", bytes,
                       flag == flag_bf16 ? "bf16" : "fp16", length, expect);
  if (flag == flag_bf16) {
    runtime::unpack_bf16(reinterpret_cast<const uint16_t*>(payload), out, length);
    return {};
  }
  float scale;
  std::memcpy(&scale, payload, scale_bytes);
  if (!is_power_of_two_scale(scale))
    return fmt::format("fp16 scale {} is not a normal power of two > 0", scale);
  runtime::unpack_fp16(reinterpret_cast<const uint16_t*>(payload + scale_bytes), scale,
                       out, length);
  return {};
}

void round_half(uint16_t flag, float* x, size_t length) noexcept {
  if (flag == flag_bf16)
    runtime::round_bf16(x, length);
  else if (flag == flag_fp16)
    runtime::round_fp16(x, length);
}

} // namespace rw::protocol
