#include "worker/compression.hpp"

#include "runtime/compression.hpp"

namespace rw::actors::detail {

void pick_topk(worker_op& op, std::vector<float>& residual,
               const runtime::chunk_layout& layout, const compression_spec& z,
               uint64_t step) {
  if (residual.size() != layout.elements)
    residual.assign(layout.elements, 0.0f);
  op.picked_indices.clear();
  op.picked_values.clear();
  std::vector<uint32_t> indices;
  std::vector<float> values;
  for (uint32_t c = 0; c < layout.count(); ++c) {
    auto offset = layout.offset(c);
    auto length = layout.length(c);
    runtime::topk_feedback(residual.data() + offset, op.src + offset, length,
                           runtime::topk_chunk_count(z.ratio, z.warmup, step, length),
                           indices, values);
    for (size_t i = 0; i < indices.size(); ++i) {
      op.picked_indices.push_back(offset + indices[i]);
      op.picked_values.push_back(values[i]);
    }
  }
  op.sparse = true;
  op.src = nullptr;
  op.indices = op.picked_indices.data();
  op.values = op.picked_values.data();
  op.count = op.picked_indices.size();
}

} // namespace rw::actors::detail
