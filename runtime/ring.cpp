#include "runtime/ring.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <xxhash.h>

namespace rw::runtime {

hash_ring::hash_ring(std::vector<std::string> nodes, uint32_t vnodes, uint64_t version)
  : nodes_(std::move(nodes)), vnodes_(vnodes), version_(version) {
  if (nodes_.empty())
    throw std::invalid_argument("a hash ring needs at least one node");
  if (vnodes_ == 0)
    throw std::invalid_argument("a hash ring needs at least one virtual node per node");
  std::set<std::string> seen;
  for (auto& n : nodes_) {
    if (n.empty())
      throw std::invalid_argument("a hash ring's node names must not be empty");
    if (!seen.insert(n).second)
      throw std::invalid_argument(fmt::format("node '{}' is on the ring twice", n));
  }
  points_.reserve(size_t{nodes_.size()} * vnodes_);
  for (uint32_t i = 0; i < nodes_.size(); ++i)
    for (uint32_t v = 0; v < vnodes_; ++v) {
      auto label = fmt::format("{}#{}", nodes_[i], v);
      points_.emplace_back(XXH3_64bits(label.data(), label.size()), i);
    }
  // Ties (vanishingly rare) go to the node listed first, on every machine alike.
  std::sort(points_.begin(), points_.end());
}

uint64_t hash_ring::key(std::string_view tensor, uint32_t chunk) noexcept {
  return XXH3_64bits_withSeed(tensor.data(), tensor.size(), chunk);
}

uint32_t hash_ring::owner_of_key(uint64_t key) const noexcept {
  auto it = std::lower_bound(points_.begin(), points_.end(), key,
                             [](const auto& p, uint64_t k) { return p.first < k; });
  if (it == points_.end())
    it = points_.begin();
  return it->second;
}

uint32_t hash_ring::successor_of_key(uint64_t key) const noexcept {
  auto it = std::lower_bound(points_.begin(), points_.end(), key,
                             [](const auto& p, uint64_t k) { return p.first < k; });
  auto start = static_cast<size_t>(it - points_.begin()) % points_.size();
  auto owner = points_[start].second;
  for (size_t i = 1; i < points_.size(); ++i) {
    auto n = points_[(start + i) % points_.size()].second;
    if (n != owner)
      return n;
  }
  return owner;
}

uint32_t hash_ring::owner(std::string_view tensor, uint32_t chunk) const noexcept {
  return owner_of_key(key(tensor, chunk));
}

} // namespace rw::runtime
