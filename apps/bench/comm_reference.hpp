#pragma once
// What `rw-bench comm --verify` checks a result against when the job compresses: each
// rank's gradient as the node receives it (rounded to bf16 / fp16 per chunk, or the
// chunk's top-k of gradient plus residual, as sparse pairs densified), and the result as
// a worker reads it (rounded per chunk with compress_updates). The same functions the
// worker and the node use (runtime/compression.hpp, protocol/half.hpp), applied in
// one process: a mismatch is a bug in how the pieces are put together, not rounding.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rackweave/job_spec.hpp"
#include "runtime/chunking.hpp"

namespace rw::bench {

class comm_reference {
public:
  /// `spec`: the job (its tensors end to end in the gradient, chunk size,
  /// compression); `workers` ranks, each with its own top-k residual.
  comm_reference(const job_spec& spec, uint32_t workers);

  /// Turns rank `rank`'s gradient of step `step` (the tensors end to end) into what the
  /// node sums for it. For top-k this advances the rank's residual: call it once per
  /// rank per step, steps in order (the step sets the warm-up's ratio).
  void as_received(uint32_t rank, uint64_t step, float* grad);

  /// Turns the node's result into what a worker reads.
  void as_answered(float* result) const;

private:
  compression_spec compression_;
  std::vector<runtime::chunk_layout> layouts_; // per tensor, end to end
  std::vector<std::vector<float>> residuals_;  // topk: per rank
};

} // namespace rw::bench
