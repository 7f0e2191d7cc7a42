#include "runtime/chunking.hpp"

#include <algorithm>
#include <stdexcept>

namespace rw::runtime {

chunk_layout::chunk_layout(uint64_t elements, uint32_t chunk_bytes)
  : elements(elements), chunk_elems(chunk_bytes / sizeof(float)) {
  if (chunk_elems == 0)
    throw std::invalid_argument("chunk size below one float32 element");
}

uint32_t chunk_layout::count() const noexcept {
  return static_cast<uint32_t>((elements + chunk_elems - 1) / chunk_elems);
}

uint64_t chunk_layout::offset(uint32_t index) const noexcept {
  return uint64_t{index} * chunk_elems;
}

uint32_t chunk_layout::length(uint32_t index) const noexcept {
  auto begin = offset(index);
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_elems, elements - begin));
}

routing_table::routing_table(const job_spec& spec, uint32_t num_shards,
                             std::vector<std::vector<uint32_t>> shard_endpoints)
  : num_shards_(num_shards), shard_endpoints_(std::move(shard_endpoints)) {
  if (num_shards == 0)
    throw std::invalid_argument("routing table needs at least one shard");
  if (shard_endpoints_.empty())
    shard_endpoints_.assign(num_shards, {0});
  if (shard_endpoints_.size() != num_shards)
    throw std::invalid_argument("routing table needs the endpoints of every shard");
  for (auto& eps : shard_endpoints_)
    if (eps.empty())
      throw std::invalid_argument("every shard needs at least one endpoint");
  for (auto& t : spec.tensors) {
    layouts_.emplace_back(t.elements, spec.chunk_bytes);
    first_.push_back(total_chunks_);
    total_chunks_ += layouts_.back().count();
  }
}

std::vector<uint64_t> routing_table::chunks_per_shard() const {
  std::vector<uint64_t> load(num_shards_, 0);
  for (uint32_t t = 0; t < num_tensors(); ++t)
    for (uint32_t c = 0; c < layouts_[t].count(); ++c)
      ++load[shard_of(t, c)];
  return load;
}

std::vector<uint64_t> routing_table::chunks_per_endpoint() const {
  uint32_t count = 0;
  for (auto& eps : shard_endpoints_)
    for (auto e : eps)
      count = std::max(count, e + 1);
  std::vector<uint64_t> load(count, 0);
  for (uint32_t t = 0; t < num_tensors(); ++t)
    for (uint32_t c = 0; c < layouts_[t].count(); ++c)
      ++load[endpoint_of(t, c)];
  return load;
}

} // namespace rw::runtime
