#pragma once
// Error codes that travel in error frames and surface in worker futures.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rw {

enum class errc : uint16_t {
  ok = 0,
  bad_frame,          // header does not decode, or a field is out of range
  bad_magic,          // not a RackWeave peer
  bad_version,        // wire protocol version not spoken here
  frame_too_large,    // payload length over the node's limit
  not_joined,         // data frame before a successful hello
  unknown_job,        // job id not (or no longer) known
  spec_mismatch,      // hello disagrees with the job already created
  invalid_spec,       // hello does not validate on its own
  bad_rank,           // rank outside [0, workers)
  rank_taken,         // another live worker holds this rank
  bad_chunk,          // tensor or chunk index out of range, or wrong length
  duplicate_push,     // unused: a repeated push is dropped and answered as the first was
  clock_out_of_range, // a push for a clock too far ahead
  worker_left,        // a worker the step needs has left the job
  step_timeout,       // the step waited longer than the node allows
  io_error,           // the connection failed
  timeout,            // no reply in time (worker side)
  internal,
  unknown_tensor,    // a tensor name not declared in the job (worker side)
  closed,            // a call on a worker that was closed (worker side)
  unauthorized,      // a missing or wrong job token
  stopped,           // an operator stopped the job
  duplicate_name,    // a job of that name exists already
  unavailable,       // the cluster (coordinator or a node) cannot be reached in time
  moved,             // hello at the wrong node: the message starts with the right one's
                     // HOST:PORT (a hierarchical job's worker goes to its rack's agg)
  bad_buffer,        // a buffer whose length is not the tensor's (worker side)
  too_many_requests, // more requests of one peer waiting at the node than it allows
};

const char* to_string(errc code) noexcept;

/// What a worker future throws when the node, the connection or the job fails.
class error : public std::runtime_error {
public:
  error(errc code, const std::string& message)
    : std::runtime_error(message), code_(code) {}
  errc code() const noexcept { return code_; }

private:
  errc code_;
};

} // namespace rw
