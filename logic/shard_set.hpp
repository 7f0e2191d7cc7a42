#pragma once
// Which of a node's shards serve a job (issue 36, item 2). Every shard a step touches
// costs a wake-up, a message per request and an answer batch, whatever the chunks'
// size: a small job spread over every shard of a many-core node pays that a dozen
// times per step for a chunk or two on each. So a job whose parameters are small is
// served by fewer shards: one per `bytes_per_shard` of the parameters it has on the
// node (at least one, at most all), chosen in each group of shards that serve the same
// endpoints (a NUMA domain's) by the group's share of the job's chunks, the least
// loaded first (by the parameter bytes of the jobs they serve already, so small jobs
// spread over the node). The job's chunks take the chosen shards in turn, in (tensor,
// index) order.
//
// The result is a set of moves for routing_table::remapped: each chunk keeps the
// endpoint its first shard gave it, so a worker's table never knows. Only a job the
// in-node balancer may move later is narrowed (one node, not hierarchical, no layer-wise
// optimizer: actors/shard/balance.cpp), so a job that gets busy is widened again by
// the balancer, chunk by chunk, onto idle shards. Plain code, no actor: the rack
// coordinator calls it when a job starts (actors/rack/create.cpp). Tests:
// tests/unit/test_shard_set.cpp.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/chunking.hpp"

namespace rw::actors::detail {

/// What --job-kib-per-shard auto means on a node of `shards` shards, and why (for the
/// node's start line): 1024 KiB on a node of `narrow_from_shards` shards or more, 0
/// (every job over every shard) below.
struct shard_share_choice {
  uint64_t bytes_per_shard = 0;
  std::string why;
};
constexpr uint32_t narrow_from_shards = 8;
constexpr uint64_t auto_bytes_per_shard = uint64_t{1} << 20;
shard_share_choice choose_bytes_per_shard(bool is_auto, uint64_t asked_kib,
                                          uint32_t shards);

/// The shards chosen for a job, and the moves that put its chunks there.
struct shard_set {
  std::vector<uint32_t> shards; // ascending; every shard when nothing narrows
  std::vector<std::array<uint32_t, 3>> moves; // (tensor, chunk, shard), for remapped()
  /// For the job's log line: "4 of 12 (4096 KiB of parameters here, a shard per 1024
  /// KiB)", or "all 12 (...)" when it is not narrowed.
  std::string why;
};

/// Narrows the job of `routes` (a fresh table: no chunk moved yet) to one shard per
/// `bytes_per_shard` of its parameters here. `shard_endpoints[s]`: the endpoints serving
/// shard s (shards with equal lists form a group; empty: one group); `load[s]`: the
/// parameter bytes shard s serves for other jobs (shorter: zeros). `bytes_per_shard` 0
/// or a job too big to narrow: no moves, every shard.
shard_set narrow_job(const runtime::routing_table& routes, uint64_t bytes_per_shard,
                     const std::vector<std::vector<uint32_t>>& shard_endpoints,
                     const std::vector<uint64_t>& load);

/// Adds to `load` (grown to the table's shard count) the parameter bytes of each chunk
/// `routes` serves here, on its shard.
void add_load(const runtime::routing_table& routes, std::vector<uint64_t>& load);

} // namespace rw::actors::detail
