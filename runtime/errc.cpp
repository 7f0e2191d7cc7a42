#include "rackweave/errc.hpp"

namespace rw {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::ok: return "ok";
    case errc::bad_frame: return "bad_frame";
    case errc::bad_magic: return "bad_magic";
    case errc::bad_version: return "bad_version";
    case errc::frame_too_large: return "frame_too_large";
    case errc::not_joined: return "not_joined";
    case errc::unknown_job: return "unknown_job";
    case errc::spec_mismatch: return "spec_mismatch";
    case errc::invalid_spec: return "invalid_spec";
    case errc::bad_rank: return "bad_rank";
    case errc::rank_taken: return "rank_taken";
    case errc::bad_chunk: return "bad_chunk";
    case errc::duplicate_push: return "duplicate_push";
    case errc::clock_out_of_range: return "clock_out_of_range";
    case errc::worker_left: return "worker_left";
    case errc::step_timeout: return "step_timeout";
    case errc::io_error: return "io_error";
    case errc::timeout: return "timeout";
    case errc::internal: return "internal";
    case errc::unknown_tensor: return "unknown_tensor";
    case errc::closed: return "closed";
    case errc::unauthorized: return "unauthorized";
    case errc::stopped: return "stopped";
    case errc::duplicate_name: return "duplicate_name";
    case errc::unavailable: return "unavailable";
    case errc::moved: return "moved";
    case errc::bad_buffer: return "bad_buffer";
    case errc::too_many_requests: return "too_many_requests";
  }
  return "unknown_error";
}

} // namespace rw
