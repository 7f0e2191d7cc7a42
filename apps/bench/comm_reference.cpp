#include "apps/bench/comm_reference.hpp"

#include <algorithm>
#include <cstring>

#include "protocol/half.hpp"
#include "runtime/compression.hpp"

namespace rw::bench {

comm_reference::comm_reference(const job_spec& spec, uint32_t workers)
  : compression_(spec.compression) {
  uint64_t total = 0;
  for (auto& t : spec.tensors) {
    layouts_.emplace_back(t.elements, spec.chunk_bytes);
    total += t.elements;
  }
  if (compression_.kind == compression_spec::topk)
    residuals_.assign(workers, std::vector<float>(total, 0.0f));
}

void comm_reference::as_received(uint32_t rank, uint64_t step, float* grad) {
  auto half = protocol::half_flag(compression_);
  std::vector<uint32_t> indices;
  std::vector<float> values;
  uint64_t at = 0;
  for (auto& l : layouts_) {
    for (uint32_t c = 0; c < l.count(); ++c) {
      float* chunk = grad + at + l.offset(c);
      auto length = l.length(c);
      if (half != 0) {
        protocol::round_half(half, chunk, length);
      } else if (compression_.kind == compression_spec::topk) {
        float* residual = residuals_.at(rank).data() + at + l.offset(c);
        runtime::topk_feedback(residual, chunk, length,
                               runtime::topk_chunk_count(
                                 compression_.ratio, compression_.warmup, step, length),
                               indices, values);
        // As the node densifies pairs: zeros, then each value added at its index.
        std::fill(chunk, chunk + length, 0.0f);
        for (size_t i = 0; i < indices.size(); ++i)
          chunk[indices[i]] += values[i];
      }
    }
    at += l.elements;
  }
}

void comm_reference::as_answered(float* result) const {
  if (!compression_.updates)
    return;
  auto half = protocol::half_flag(compression_);
  uint64_t at = 0;
  for (auto& l : layouts_) {
    for (uint32_t c = 0; c < l.count(); ++c)
      protocol::round_half(half, result + at + l.offset(c), l.length(c));
    at += l.elements;
  }
}

} // namespace rw::bench
