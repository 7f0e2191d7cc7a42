#include "runtime/chunking.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/layerwise.hpp"

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
                             std::vector<std::vector<uint32_t>> shard_endpoints,
                             const hash_ring* ring, uint32_t self_node, uint32_t replicas)
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
  local_chunks_ = total_chunks_;
  if (ring == nullptr)
    return;
  if (self_node >= ring->nodes().size())
    throw std::invalid_argument("routing table for a node that is not on the ring");
  index_.assign(total_chunks_, no_seq);
  owned_.assign(total_chunks_, 0);
  local_chunks_ = 0;
  bool replicated = replicas > 0 && ring->nodes().size() > 1;
  std::vector<uint64_t> per_shard(num_shards, 0);
  if (replicated)
    mirror_.assign(total_chunks_, not_here);
  for (uint32_t t = 0; t < spec.tensors.size(); ++t)
    for (uint32_t c = 0; c < layouts_[t].count(); ++c) {
      auto g = first_[t] + c;
      bool owned = home_on_ring(*ring, spec, t, c) == self_node;
      bool replica = !owned && replicated
                     && replica_on_ring(*ring, spec, t, c) == self_node;
      if (!owned && !replica)
        continue;
      index_[g] = per_shard[g % num_shards]++;
      owned_[g] = owned ? 1 : 0;
      if (owned && replicated)
        mirror_[g] = replica_on_ring(*ring, spec, t, c);
      ++(owned ? local_chunks_ : replica_chunks_);
    }
}

std::vector<uint64_t> routing_table::chunks_per_shard() const {
  std::vector<uint64_t> load(num_shards_, 0);
  for (uint32_t t = 0; t < num_tensors(); ++t)
    for (uint32_t c = 0; c < layouts_[t].count(); ++c)
      if (is_local(t, c))
        ++load[shard_of(t, c)];
  return load;
}

std::shared_ptr<const routing_table> routing_table::remapped(
  const std::vector<std::array<uint32_t, 3>>& moves) const {
  auto next = std::make_shared<routing_table>(*this);
  if (next->moved_shard_.empty()) {
    next->moved_shard_.assign(total_chunks_, not_here);
    for (uint32_t t = 0; t < num_tensors(); ++t)
      for (uint32_t c = 0; c < layouts_[t].count(); ++c)
        next->moved_shard_[first_[t] + c] = first_shard_of(t, c);
  }
  for (auto& [t, c, shard] : moves) {
    if (t >= num_tensors() || c >= layouts_[t].count() || !is_local(t, c))
      throw std::invalid_argument(fmt::format("chunk {}/{} is not served here", t, c));
    if (shard >= num_shards_)
      throw std::invalid_argument(
        fmt::format("shard {} does not exist (the node has {})", shard, num_shards_));
    next->moved_shard_[first_[t] + c] = shard;
  }
  next->moved_index_.assign(total_chunks_, no_seq);
  std::vector<uint64_t> count(num_shards_, 0);
  for (uint64_t g = 0; g < total_chunks_; ++g)
    if (next->moved_shard_[g] != not_here)
      next->moved_index_[g] = count[next->moved_shard_[g]]++;
  return next;
}

std::vector<uint64_t> routing_table::chunks_per_endpoint() const {
  uint32_t count = 0;
  for (auto& eps : shard_endpoints_)
    for (auto e : eps)
      count = std::max(count, e + 1);
  std::vector<uint64_t> load(count, 0);
  for (uint32_t t = 0; t < num_tensors(); ++t)
    for (uint32_t c = 0; c < layouts_[t].count(); ++c)
      if (is_local(t, c))
        ++load[endpoint_of(t, c)];
  return load;
}

uint32_t home_on_ring(const hash_ring& ring, const job_spec& spec, uint32_t tensor,
                      uint32_t chunk) noexcept {
  // A layer-wise optimizer's trust ratio spans its tensor: the whole tensor shares the
  // home of its chunk 0, so the ratio is taken on one node.
  return ring.owner(spec.tensors[tensor].name,
                    is_layerwise(spec.optimizer.kind) ? 0 : chunk);
}

uint32_t replica_on_ring(const hash_ring& ring, const job_spec& spec, uint32_t tensor,
                         uint32_t chunk) noexcept {
  return ring.successor_of_key(hash_ring::key(
    spec.tensors[tensor].name, is_layerwise(spec.optimizer.kind) ? 0 : chunk));
}

job_routes::job_routes(std::shared_ptr<const routing_table> single)
  : tables_{std::move(single)}, endpoint_base_{0} {}

job_routes::job_routes(std::vector<std::shared_ptr<const routing_table>> tables,
                       std::vector<uint32_t> endpoint_base)
  : tables_(std::move(tables)), endpoint_base_(std::move(endpoint_base)) {
  if (tables_.empty() || tables_.size() != endpoint_base_.size())
    throw std::invalid_argument("job routes need one table and endpoint base per node");
}

uint32_t job_routes::home_of(uint32_t tensor, uint32_t chunk) const noexcept {
  // The tables know which chunks are theirs; ask them rather than hash again. Every
  // chunk has one home: node 0 when no other node has it (and always with one node).
  for (uint32_t n = 1; n < tables_.size(); ++n)
    if (tables_[n]->is_local(tensor, chunk) && tables_[n]->is_owned(tensor, chunk))
      return n;
  return 0;
}

uint32_t job_routes::replica_of(uint32_t tensor, uint32_t chunk) const noexcept {
  for (uint32_t n = 0; n < tables_.size(); ++n)
    if (tables_[n]->is_local(tensor, chunk) && !tables_[n]->is_owned(tensor, chunk))
      return n;
  return UINT32_MAX;
}

uint32_t job_routes::replica_connection_of(uint32_t tensor,
                                           uint32_t chunk) const noexcept {
  auto n = replica_of(tensor, chunk);
  return n == UINT32_MAX ? UINT32_MAX
                         : endpoint_base_[n] + tables_[n]->endpoint_of(tensor, chunk);
}

uint32_t job_routes::connection_of(uint32_t tensor, uint32_t chunk) const noexcept {
  auto n = home_of(tensor, chunk);
  return endpoint_base_[n] + tables_[n]->endpoint_of(tensor, chunk);
}

uint32_t job_routes::node_of_connection(uint32_t conn) const noexcept {
  uint32_t n = 0;
  while (n + 1 < endpoint_base_.size() && endpoint_base_[n + 1] <= conn)
    ++n;
  return n;
}

std::shared_ptr<const job_routes> routes_basis::rebuild(
  const std::vector<std::string>& nodes, uint64_t version, uint32_t replicas) const {
  hash_ring ring{nodes, vnodes, version};
  std::vector<std::shared_ptr<const routing_table>> tables;
  std::vector<uint32_t> bases;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    auto at = std::find(names.begin(), names.end(), nodes[i]);
    if (at == names.end())
      throw std::invalid_argument("node '" + nodes[i]
                                  + "' is not one this worker joined");
    auto n = static_cast<size_t>(at - names.begin());
    tables.push_back(std::make_shared<routing_table>(
      spec, num_shards[n], shard_endpoints[n], &ring, i, replicas));
    bases.push_back(endpoint_base[n]);
  }
  return std::make_shared<job_routes>(std::move(tables), std::move(bases));
}

} // namespace rw::runtime
