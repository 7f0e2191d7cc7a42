#pragma once
// The worker's side of a job's compression (rackweave/job_spec.hpp: compression_spec)
// that keeps state between pushes: top-k with error feedback. (bf16 / fp16 keep none:
// each chunk is packed as it is sent, protocol/half.hpp.)

#include <vector>

#include "worker/proxy.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/chunking.hpp"

namespace rw::actors::detail {

/// Turns the dense push `op` of step `step` into the sparse push top-k sends: per chunk
/// of `layout`, the gradient at op.src is added into `residual` (the tensor's, as long
/// as it; what earlier pushes did not send), the k = runtime::topk_chunk_count(ratio,
/// warmup, step, length) entries of largest magnitude (all of a short chunk; more
/// during the warm-up) are picked (runtime::topk_feedback: ties to the lower index) and
/// taken out of the residual. op then owns the pairs (picked_indices, picked_values),
/// points at them, and no longer at the caller's gradient. Chunks go out as sparse
/// pairs (or dense, where that is smaller), so the node's sparse path sums them; a
/// re-sent chunk sends the same pairs.
void pick_topk(worker_op& op, std::vector<float>& residual,
               const runtime::chunk_layout& layout, const compression_spec& z,
               uint64_t step);

} // namespace rw::actors::detail
