#pragma once
// How tensors are cut into chunks, and which shard owns which chunk.
//
// A tensor of N float32 elements is cut into ceil(N * 4 / chunk_bytes) chunks; only
// the last one may be shorter. Chunk ids (job, tensor, index) are stable for the life
// of a job. The routing table spreads a job's chunks over the node's shards
// round-robin in (tensor, index) order, so no two shards differ by more than one chunk,
// and each shard's chunks round-robin over the endpoints that serve it (those in its
// NUMA domain), so endpoints are balanced too. Node and worker compute the same table
// from the job spec and the welcome's shard -> endpoints lists.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rackweave/job_spec.hpp"

namespace rw::runtime {

struct chunk_layout {
  uint64_t elements = 0;     // elements in the whole tensor
  uint32_t chunk_elems = 0;  // elements per full chunk

  chunk_layout() = default;
  chunk_layout(uint64_t elements, uint32_t chunk_bytes);

  uint32_t count() const noexcept;
  uint64_t offset(uint32_t index) const noexcept; // first element of chunk `index`
  uint32_t length(uint32_t index) const noexcept; // elements in chunk `index`
};

class routing_table {
public:
  /// `shard_endpoints[s]`: the endpoints serving shard s (each list non-empty); empty
  /// means one endpoint, 0, for every shard.
  routing_table(const job_spec& spec, uint32_t num_shards,
                std::vector<std::vector<uint32_t>> shard_endpoints = {});

  uint32_t num_shards() const noexcept {
    return num_shards_;
  }
  uint32_t num_tensors() const noexcept {
    return static_cast<uint32_t>(layouts_.size());
  }
  const chunk_layout& layout(uint32_t tensor) const {
    return layouts_.at(tensor);
  }
  uint64_t total_chunks() const noexcept {
    return total_chunks_;
  }
  /// Shard index owning (tensor, chunk). Preconditions: both in range.
  uint32_t shard_of(uint32_t tensor, uint32_t chunk) const noexcept {
    return static_cast<uint32_t>((first_[tensor] + chunk) % num_shards_);
  }
  /// Endpoint (index into the node's endpoint list) that (tensor, chunk) travels on.
  uint32_t endpoint_of(uint32_t tensor, uint32_t chunk) const noexcept {
    auto seq = first_[tensor] + chunk;
    auto shard = seq % num_shards_;
    auto& eps = shard_endpoints_[shard];
    // Each shard starts its rotation at its own index, so the remainders of different
    // shards fall on different endpoints.
    return eps[(seq / num_shards_ + shard) % eps.size()];
  }
  const std::vector<std::vector<uint32_t>>& shard_endpoints() const noexcept {
    return shard_endpoints_;
  }
  /// Chunks each endpoint carries (for the load log line and tests).
  std::vector<uint64_t> chunks_per_endpoint() const;
  /// Position of (tensor, chunk) among the chunks its shard owns.
  uint64_t local_index(uint32_t tensor, uint32_t chunk) const noexcept {
    return (first_[tensor] + chunk) / num_shards_;
  }
  /// Chunks each shard owns (for the load log line and tests).
  std::vector<uint64_t> chunks_per_shard() const;

private:
  uint32_t num_shards_;
  std::vector<std::vector<uint32_t>> shard_endpoints_;
  std::vector<chunk_layout> layouts_;
  std::vector<uint64_t> first_; // job-wide sequence number of each tensor's chunk 0
  uint64_t total_chunks_ = 0;
};

} // namespace rw::runtime
