#pragma once
// A chunk as 16-bit values on the wire (a job with compression bf16 or fp16): the
// payload of a push or an update flagged flag_bf16 or flag_fp16 (frame.hpp).
//
//   bf16: `length` bfloat16 values, 2 bytes each, little-endian;
//   fp16: a float32 scale (a normal power of two), then `length` IEEE half values:
//         element i is half_i * scale.
//
// The receiver checks the size before reading the payload and the scale before using
// any of it, then widens into float32 (exact: every 16-bit value is a float32). Both
// checks are here, apart from the poller and the worker, so they are fuzzed on their
// own (tests/fuzz/fuzz_half.cpp). The rounding is runtime/compression.hpp's.

#include <cstddef>
#include <cstdint>
#include <string>

#include "rackweave/job_spec.hpp"

namespace rw::protocol {

/// The frame flag of a compression's 16-bit payloads: flag_bf16, flag_fp16, or 0 where
/// chunks travel as float32 (none) or sparse pairs (topk).
uint16_t half_flag(const compression_spec& c) noexcept;

/// Payload bytes of a chunk of `length` values under `flag` (flag_bf16 or flag_fp16).
size_t half_payload_bytes(uint16_t flag, size_t length) noexcept;

/// Writes the payload of `length` floats at `in` into `out` (half_payload_bytes),
/// rounded to nearest even; fp16 picks the chunk's scale (runtime::fp16_scale).
void narrow_half(uint16_t flag, const float* in, size_t length, std::byte* out) noexcept;

/// Widens a payload of `bytes` (may be unaligned) into `length` floats at `out`. "" on
/// success; else why the payload is not one (a size other than half_payload_bytes, a
/// flag other than exactly one of flag_bf16 / flag_fp16, an fp16 scale that is not a
/// normal power of two), and `out` is left unspecified.
std::string widen_half(uint16_t flag, const std::byte* payload, size_t bytes, float* out,
                       size_t length);

/// What the receiver of `length` floats at `x` gets under `flag`, in place (as
/// narrow_half then widen_half): the reference that tests, a verifying benchmark and
/// shared-memory workers (whose chunks do not travel) apply.
void round_half(uint16_t flag, float* x, size_t length) noexcept;

} // namespace rw::protocol
