#pragma once
// The consistent-hash ring that gives every chunk of a multi-node job its home node.
//
// Each node stands on the ring at `vnodes` points, XXH3-64 of "<node name>#<i>". A
// chunk's key is XXH3-64 of its tensor's name with the chunk index as seed; its home is
// the node of the first point at or after the key (wrapping around). Nodes and workers
// compute the same homes from the same node names, so only the names and the virtual
// node count travel. Removing one of N nodes moves only the chunks that node owned
// (about 1/N); adding one moves about 1/(N+1), all to the new node. The coordinator
// keeps the ring's version: it grows by one whenever the node set of a job changes.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rackweave/defaults.hpp"

namespace rw::runtime {

class hash_ring {
public:
  /// `nodes`: distinct, non-empty names, in the job's node order (the index owner()
  /// returns). Throws std::invalid_argument on an empty list, an empty or repeated
  /// name, or vnodes == 0.
  explicit hash_ring(std::vector<std::string> nodes,
                     uint32_t vnodes = defaults::ring_vnodes, uint64_t version = 1);

  /// Index into nodes() of the home of chunk `chunk` of tensor `tensor`.
  uint32_t owner(std::string_view tensor, uint32_t chunk) const noexcept;
  /// Index into nodes() of the node owning a raw 64-bit key.
  uint32_t owner_of_key(uint64_t key) const noexcept;
  /// Index into nodes() of the key's replica: the first node other than its owner met
  /// walking on from the key; the node that owns the key once its owner leaves the ring.
  /// The owner itself on a ring of one node.
  uint32_t successor_of_key(uint64_t key) const noexcept;
  /// The key of chunk `chunk` of tensor `tensor`.
  static uint64_t key(std::string_view tensor, uint32_t chunk) noexcept;

  const std::vector<std::string>& nodes() const noexcept { return nodes_; }
  uint32_t vnodes() const noexcept { return vnodes_; }
  uint64_t version() const noexcept { return version_; }

private:
  std::vector<std::string> nodes_;
  uint32_t vnodes_;
  uint64_t version_;
  std::vector<std::pair<uint64_t, uint32_t>> points_; // (position, node), sorted
};

} // namespace rw::runtime
