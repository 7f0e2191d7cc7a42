#pragma once
// What frame carries a worker's operation on a chunk: the one op -> frame encoder that
// every path a worker sends by (TCP and libfabric frames, shared-memory requests) uses.
//
//   op          kind   flags
//   init        init   -
//   push        push   -
//   push_pull   push   flag_want_result (the node answers the chunk's sum)
//   pull        pull   flag_only_changed (only newer than the clock), or
//                      flag_subscribe (every later sum, unasked)
//
// A pull's clock is the version it wants at least; the others' is the worker's step.

#include <cstdint>

#include "protocol/frame.hpp"

namespace rw::protocol {

/// What a worker asks of a chunk.
enum class data_op : uint8_t { init, push, pull, push_pull };

/// A pull's options (ignored for the other operations). Both set: subscribe wins.
struct pull_options {
  bool only_changed = false;
  bool subscribe = false;
};

/// The kind and flags of the frame that carries `op`.
struct data_frame {
  frame_kind kind = frame_kind::invalid;
  uint16_t flags = 0;
};

data_frame frame_for(data_op op, pull_options pull = {}) noexcept;

} // namespace rw::protocol
