#pragma once
// Whether a data frame fits the job its connection joined: the checks a node makes on a
// frame's header before it reads the payload, as a pure function of the header and what
// the connection joined (poller/sink.cpp applies them; a refusal is an error frame).
//
//   frame        checked                                            payload
//   bye          job, rank                                          none
//   hyper        job, rank                                          1..max_hyper_bytes
//   pull         job, rank, tensor, chunk, homed here               none
//   init         job, rank, tensor, chunk, homed here               the chunk, float32
//   push         job, rank, tensor, chunk, homed here, 16-bit flag  the chunk, float32,
//                                                                   or bf16 / fp16 as
//                                                                   the job compresses
//   push_sparse  job, rank, tensor, chunk, homed here               pairs, at most the
//                                                                   dense chunk
//   state        job, rank, tensor, chunk, homed here, flags        a load of an array:
//                                                                   the chunk, float32;
//                                                                   else none
//
// A chunk homed here by the ring the job just left, and no longer, is dropped without a
// word: its sender routes it again by the new ring.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/frame.hpp"
#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/chunking.hpp"

namespace rw::protocol {

/// The most bytes a hyper frame's HyperChange may hold.
constexpr uint32_t max_hyper_bytes = 4096;

/// What the connection joined.
struct data_context {
  uint32_t job_id = 0;
  uint32_t rank = 0;
  const runtime::routing_table* routes = nullptr;   // the job's chunks here (not null)
  const runtime::routing_table* previous = nullptr; // before the ring last changed
  /// flag_bf16 / flag_fp16: the 16-bit values the job's dense pushes carry; 0: float32
  /// (no compression, topk, a mirror link's sums, shared memory).
  uint16_t job_half = 0;
  const compression_spec* compression = nullptr; // the job's, for refusals (not null)
  std::string_view node_name;                    // this node's, for refusals
};

struct data_check {
  enum verdict_t { receive, drop, refuse } verdict = receive;
  /// receive: the payload the frame carries (0: none) and whether it is a chunk (read
  /// into a chunk buffer) or a HyperChange (a buffer of max_hyper_bytes).
  enum payload_t { none, chunk, hyper } payload = none;
  errc code = errc::ok; // refuse: why, for the error frame
  std::string why;
};

/// Checks frame `h` (bye, hyper, pull, init, push, push_sparse or state) against `ctx`.
data_check check_data_frame(const frame_header& h, const data_context& ctx);

} // namespace rw::protocol
