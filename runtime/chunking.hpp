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
//
// A job on several nodes gives each chunk a home node by consistent hashing
// (runtime/ring; home_on_ring): each chunk on its own, or, for a layer-wise optimizer
// (LAMB, LARS, whose trust ratio spans a tensor), each tensor whole, at its chunk 0's.
// With replicas = 1 each chunk is also served by its replica node (replica_on_ring: the
// next other node on the ring, the home it gets if its home leaves). A node's table
// then routes only the chunks it serves, homed there or replicated there (is_owned
// tells which): chunk number g of the job (in (tensor, index) order) goes to shard
// g mod shards, so a chunk that stays on a node when the ring changes stays on its
// shard, and each shard's chunks take its endpoints in turn, in (tensor, index) order;
// shard_of() of any other chunk is not_here. A node may move chunks between shards of
// one NUMA domain while a job runs (remapped(): actors/shard/balance.hpp); only
// the node's copy of its table changes: a chunk keeps the endpoint it travelled on
// (endpoint_of is that of its first shard), so a worker's table never needs to know.
// A worker's job_routes holds one such
// table per node of the job and says which connection each chunk takes to its home
// (and, for an init, to its replica). A home's table names the replica of each chunk
// it homes (mirror_of): the home sends it each step's sum.

#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rackweave/job_spec.hpp"
#include "runtime/ring.hpp"

namespace rw::runtime {

struct chunk_layout {
  uint64_t elements = 0;    // elements in the whole tensor
  uint32_t chunk_elems = 0; // elements per full chunk

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
  /// With `ring`, the table of node `self_node` of the ring: only the chunks homed
  /// there are routed.
  /// With `replicas` (0 or 1; with a ring of two nodes or more), the chunks replicated
  /// on this node are routed too.
  routing_table(const job_spec& spec, uint32_t num_shards,
                std::vector<std::vector<uint32_t>> shard_endpoints = {},
                const hash_ring* ring = nullptr, uint32_t self_node = 0,
                uint32_t replicas = 0);

  /// What shard_of() says of a chunk homed on another node.
  static constexpr uint32_t not_here = UINT32_MAX;

  uint32_t num_shards() const noexcept { return num_shards_; }
  uint32_t num_tensors() const noexcept { return static_cast<uint32_t>(layouts_.size()); }
  const chunk_layout& layout(uint32_t tensor) const { return layouts_.at(tensor); }
  uint64_t total_chunks() const noexcept { return total_chunks_; }
  /// Chunks homed on this node (all of them without a ring).
  uint64_t local_chunks() const noexcept { return local_chunks_; }
  /// Whether (tensor, chunk) is served on this node: homed here, or replicated here.
  /// Preconditions: both in range.
  bool is_local(uint32_t tensor, uint32_t chunk) const noexcept {
    return index_of(tensor, chunk) != no_seq;
  }
  /// Whether (tensor, chunk) is homed on this node (its replica answers nobody).
  bool is_owned(uint32_t tensor, uint32_t chunk) const noexcept {
    return owned_.empty() ? true : owned_[first_[tensor] + chunk] != 0;
  }
  /// Chunks replicated on this node (0 without replicas).
  uint64_t replica_chunks() const noexcept { return replica_chunks_; }
  /// Whether the table's ring keeps a replica of each chunk (replicas = 1, two nodes
  /// or more).
  bool replicated() const noexcept { return !mirror_.empty(); }
  /// The ring index of the replica node of (tensor, chunk), a chunk homed here, or
  /// not_here (no replicas, or the chunk is not homed here). Its home sends it each
  /// step's summed gradient (actors/links/mirror_link).
  uint32_t mirror_of(uint32_t tensor, uint32_t chunk) const noexcept {
    return mirror_.empty() ? not_here : mirror_[first_[tensor] + chunk];
  }
  /// Shard index owning (tensor, chunk), or not_here. Preconditions: both in range.
  uint32_t shard_of(uint32_t tensor, uint32_t chunk) const noexcept {
    if (index_of(tensor, chunk) == no_seq)
      return not_here;
    if (!moved_shard_.empty())
      return moved_shard_[first_[tensor] + chunk];
    return static_cast<uint32_t>((first_[tensor] + chunk) % num_shards_);
  }
  /// The shard (tensor, chunk) was first given, before any move (not_here if it is not
  /// served here).
  uint32_t first_shard_of(uint32_t tensor, uint32_t chunk) const noexcept {
    if (index_of(tensor, chunk) == no_seq)
      return not_here;
    return static_cast<uint32_t>((first_[tensor] + chunk) % num_shards_);
  }
  /// This table with chunks moved to other shards: each (tensor, chunk, shard) of
  /// `moves` (chunks served here; shards in range, else std::invalid_argument). Every
  /// other chunk stays where it is; each shard's chunks are numbered again in
  /// (tensor, index) order (local_index).
  std::shared_ptr<const routing_table> remapped(
    const std::vector<std::array<uint32_t, 3>>& moves) const;
  /// Whether a chunk has ever moved from the shard it was first given.
  bool is_remapped() const noexcept { return !moved_shard_.empty(); }
  /// Endpoint (index into the node's endpoint list) that (tensor, chunk) travels on.
  /// Precondition: is_local(tensor, chunk).
  uint32_t endpoint_of(uint32_t tensor, uint32_t chunk) const noexcept {
    auto shard = (first_[tensor] + chunk) % num_shards_;
    auto& eps = shard_endpoints_[shard];
    // Each shard starts its rotation at its own index, so the remainders of different
    // shards fall on different endpoints.
    return eps[(index_of(tensor, chunk) + shard) % eps.size()];
  }
  const std::vector<std::vector<uint32_t>>& shard_endpoints() const noexcept {
    return shard_endpoints_;
  }
  /// Chunks each endpoint carries (for the load log line and tests).
  std::vector<uint64_t> chunks_per_endpoint() const;
  /// Position of (tensor, chunk) among the chunks its shard serves.
  /// Precondition: is_local(tensor, chunk).
  uint64_t local_index(uint32_t tensor, uint32_t chunk) const noexcept {
    return moved_index_.empty() ? index_of(tensor, chunk)
                                : moved_index_[first_[tensor] + chunk];
  }
  /// Job-wide chunk number of (tensor, chunk): its position in (tensor, index) order.
  uint64_t global_index(uint32_t tensor, uint32_t chunk) const noexcept {
    return first_[tensor] + chunk;
  }
  /// Chunks each shard owns (for the load log line and tests).
  std::vector<uint64_t> chunks_per_shard() const;

private:
  static constexpr uint64_t no_seq = UINT64_MAX;
  // The chunk's position among its shard's chunks here, or no_seq if not served here.
  uint64_t index_of(uint32_t tensor, uint32_t chunk) const noexcept {
    auto g = first_[tensor] + chunk;
    return index_.empty() ? g / num_shards_ : index_[g];
  }

  uint32_t num_shards_;
  std::vector<std::vector<uint32_t>> shard_endpoints_;
  std::vector<chunk_layout> layouts_;
  std::vector<uint64_t> first_; // job-wide sequence number of each tensor's chunk 0
  uint64_t total_chunks_ = 0;
  uint64_t local_chunks_ = 0;
  uint64_t replica_chunks_ = 0;
  std::vector<uint64_t> index_; // by job-wide chunk number; empty: every chunk local
  std::vector<uint8_t> owned_;  // by job-wide chunk number (with a ring)
  std::vector<uint32_t>
    mirror_; // by job-wide chunk number: replica of a chunk homed here
  // After a move between shards (empty before): by job-wide chunk number, the shard
  // serving it and its position among that shard's chunks.
  std::vector<uint32_t> moved_shard_;
  std::vector<uint64_t> moved_index_;
};

/// Index (in the ring's node order) of the home of chunk `chunk` of tensor `tensor`.
uint32_t home_on_ring(const hash_ring& ring, const job_spec& spec, uint32_t tensor,
                      uint32_t chunk) noexcept;
/// Index of its replica's node (hash_ring::successor_of_key; a layer-wise optimizer's
/// tensor whole, as its home): the home's on a ring of one node.
uint32_t replica_on_ring(const hash_ring& ring, const job_spec& spec, uint32_t tensor,
                         uint32_t chunk) noexcept;

/// A worker's view of a job's routes: one routing table per node of the job (a single
/// one without a ring) and where each node's endpoints start in the worker's list of
/// connections.
class job_routes {
public:
  /// One node.
  explicit job_routes(std::shared_ptr<const routing_table> single);
  /// Several: tables[n] is node n's (built with the job's ring), whose endpoints are
  /// connections endpoint_base[n] .. endpoint_base[n] + (its endpoint count) - 1.
  job_routes(std::vector<std::shared_ptr<const routing_table>> tables,
             std::vector<uint32_t> endpoint_base);

  uint32_t num_tensors() const noexcept { return tables_.front()->num_tensors(); }
  const chunk_layout& layout(uint32_t tensor) const {
    return tables_.front()->layout(tensor);
  }
  uint32_t num_nodes() const noexcept { return static_cast<uint32_t>(tables_.size()); }
  /// Index of the node (in the job's node order) chunk (tensor, chunk) is homed on.
  uint32_t home_of(uint32_t tensor, uint32_t chunk) const noexcept;
  /// The worker's connection (index into its list) that (tensor, chunk) travels on.
  uint32_t connection_of(uint32_t tensor, uint32_t chunk) const noexcept;
  /// The node replicating (tensor, chunk), or UINT32_MAX (no replicas).
  uint32_t replica_of(uint32_t tensor, uint32_t chunk) const noexcept;
  /// The connection its pushes and inits also take to its replica, or UINT32_MAX.
  uint32_t replica_connection_of(uint32_t tensor, uint32_t chunk) const noexcept;
  /// The node (in the job's node order) connection `conn` leads to.
  uint32_t node_of_connection(uint32_t conn) const noexcept;
  /// Whether (tensor, chunk) is served by shard `shard` of node `node` (as its home, or
  /// as its replica).
  bool served_by(uint32_t tensor, uint32_t chunk, uint32_t node,
                 uint32_t shard) const noexcept {
    return node < tables_.size() && tables_[node]->shard_of(tensor, chunk) == shard;
  }
  const routing_table& table(uint32_t node) const { return *tables_.at(node); }

private:
  std::vector<std::shared_ptr<const routing_table>> tables_;
  std::vector<uint32_t> endpoint_base_;
};

/// What a worker keeps to route a job on several nodes by a later ring of some of them
/// (a node drained: runtime/ring keeps every other chunk where it was). Per node it
/// joined, in the first ring's order: its name, its shards' endpoints (its welcome's)
/// and its first connection in the worker's list.
struct routes_basis {
  job_spec spec;
  uint32_t vnodes = 0;
  uint64_t version = 0; // the ring's version when the worker joined
  std::vector<std::string> names;
  std::vector<uint32_t> num_shards;
  std::vector<std::vector<std::vector<uint32_t>>> shard_endpoints;
  std::vector<uint32_t> endpoint_base;

  /// The routes by the ring of `nodes` (names in ring order) at `version`, with
  /// `replicas`; throws std::invalid_argument if a name is not one of `names` (or
  /// repeats).
  std::shared_ptr<const job_routes> rebuild(const std::vector<std::string>& nodes,
                                            uint64_t version, uint32_t replicas) const;
};

} // namespace rw::runtime
