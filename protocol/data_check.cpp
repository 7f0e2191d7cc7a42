// The checks on a data frame's header (protocol/data_check.hpp).
#include "protocol/data_check.hpp"

#include <fmt/format.h>

#include "protocol/half.hpp"
#include "protocol/sparse.hpp"

namespace rw::protocol {

namespace {

data_check refused(errc code, std::string why) {
  data_check out;
  out.verdict = data_check::refuse;
  out.code = code;
  out.why = std::move(why);
  return out;
}

data_check received(data_check::payload_t payload) {
  data_check out;
  out.payload = payload;
  return out;
}

const char* half_name(uint16_t half) {
  return half == flag_bf16 ? "bf16" : half == flag_fp16 ? "fp16" : "both bf16 and fp16";
}

} // namespace

data_check check_data_frame(const frame_header& h, const data_context& ctx) {
  if (h.job_id != ctx.job_id)
    return refused(errc::unknown_job, fmt::format("unknown job {}: this connection "
                                                  "joined job {}",
                                                  h.job_id, ctx.job_id));
  if (h.rank != ctx.rank)
    return refused(errc::bad_rank, fmt::format("rank {} on a connection that joined as "
                                               "rank {}",
                                               h.rank, ctx.rank));
  if (h.kind == frame_kind::bye)
    return h.payload_bytes == 0 ? received(data_check::none)
                                : refused(errc::bad_frame, "bye carries no payload");
  if (h.kind == frame_kind::hyper) {
    if (h.payload_bytes == 0 || h.payload_bytes > max_hyper_bytes)
      return refused(errc::bad_frame,
                     fmt::format("hyper carries a HyperChange of 1..{} bytes, not {}",
                                 max_hyper_bytes, h.payload_bytes));
    return received(data_check::hyper);
  }
  const auto& routes = *ctx.routes;
  if (h.tensor_id >= routes.num_tensors())
    return refused(errc::bad_chunk,
                   fmt::format("tensor {} does not exist (the job has {})", h.tensor_id,
                               routes.num_tensors()));
  const auto& layout = routes.layout(h.tensor_id);
  if (h.chunk_index >= layout.count())
    return refused(errc::bad_chunk,
                   fmt::format("chunk {} of tensor {} does not exist (it has {})",
                               h.chunk_index, h.tensor_id, layout.count()));
  if (!routes.is_local(h.tensor_id, h.chunk_index)) {
    if (ctx.previous != nullptr && ctx.previous->is_local(h.tensor_id, h.chunk_index)) {
      data_check out; // sent by the ring the job just left: sent again
      out.verdict = data_check::drop;
      return out;
    }
    return refused(errc::bad_chunk,
                   fmt::format("chunk {}/{} of job {} is homed on another node of the "
                               "job, not on {} (consistent-hash ring): send it to its "
                               "home",
                               h.tensor_id, h.chunk_index, ctx.job_id, ctx.node_name));
  }
  if (h.kind == frame_kind::pull)
    return h.payload_bytes == 0 ? received(data_check::none)
                                : refused(errc::bad_frame, "pull carries no payload");
  const size_t length = layout.length(h.chunk_index);
  if (h.kind == frame_kind::state) {
    if ((h.flags & ~flag_state_load) != 0)
      return refused(errc::bad_frame,
                     fmt::format("a state frame's only flag is 0x{:x} (load), not 0x{:x}",
                                 flag_state_load, h.flags));
    // A read, or a load of the version alone, carries nothing; a load of an array
    // carries it whole, float32.
    const bool array_load = (h.flags & flag_state_load) != 0
                            && h.staleness != state_version_only;
    const size_t want = array_load ? length * sizeof(float) : 0;
    if (h.payload_bytes != want)
      return refused(errc::bad_chunk,
                     fmt::format("a state {} of chunk {}/{} carries {} bytes, not {}",
                                 array_load ? "load of an array" : "read or clock load",
                                 h.tensor_id, h.chunk_index, h.payload_bytes, want));
    return received(want == 0 ? data_check::none : data_check::chunk);
  }
  size_t expect = length * sizeof(float);
  // A dense push of a bf16 / fp16 job carries 16-bit values, flagged with the job's
  // format; every other frame carries float32 (inits: the exact initial values; a
  // mirror link's sums; shared memory, where nothing travels and the worker rounds its
  // chunks in place as the wire would). Sparse pushes carry float32 pairs.
  const uint16_t half = h.flags & flag_half;
  if (half != 0 && (h.kind != frame_kind::push || half != ctx.job_half))
    return refused(
      errc::bad_chunk,
      fmt::format("a {} frame of chunk {}/{} flagged as {} values: job {} {}",
                  to_string(h.kind), h.tensor_id, h.chunk_index, half_name(half),
                  ctx.job_id,
                  ctx.job_half == 0
                    ? std::string("sends float32 chunks")
                    : fmt::format("compresses with {}", to_string(*ctx.compression))));
  if (h.kind == frame_kind::push && ctx.job_half != 0) {
    if (half == 0)
      return refused(errc::bad_chunk,
                     fmt::format("chunk {}/{} carries float32 values: job {} compresses "
                                 "its gradients with {} (flag 0x{:x})",
                                 h.tensor_id, h.chunk_index, ctx.job_id,
                                 to_string(*ctx.compression), ctx.job_half));
    expect = half_payload_bytes(half, length);
  }
  if (h.kind == frame_kind::push_sparse) {
    // Pairs of 8 bytes, never more than the dense chunk (a worker sends dense then).
    if (auto why = check_sparse_size(h.payload_bytes, length); !why.empty())
      return refused(errc::bad_chunk, fmt::format("sparse chunk {}/{} carries {}",
                                                  h.tensor_id, h.chunk_index, why));
    return received(h.payload_bytes == 0 ? data_check::none : data_check::chunk);
  }
  if (h.payload_bytes != expect)
    return refused(errc::bad_chunk,
                   fmt::format("chunk {}/{} holds {} bytes, the frame carries {}",
                               h.tensor_id, h.chunk_index, expect, h.payload_bytes));
  return received(data_check::chunk);
}

} // namespace rw::protocol
