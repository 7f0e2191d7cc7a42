#pragma once
// What a node holds of a job, decided from the job's layout (runtime/job_layout.hpp) with
// no actor in it: the node's place among the job's nodes, the chunks it serves there
// (its routing table), a hierarchical job's rack part (which ranks are summed here and
// the spec its shards run), and, when a job moves, which shard takes each chunk the
// node keeps or receives. The rack coordinator (actors/rack/create.cpp and
// actors/rack/moves.cpp) calls these, then asks its shards. Tests:
// tests/unit/test_job_plan.cpp.

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/chunking.hpp"
#include "runtime/job_layout.hpp"

namespace rw::actors::detail {

using shard_endpoint_lists = std::vector<std::vector<uint32_t>>;

/// Node `node`'s index among `layout`'s nodes, or nothing if the layout leaves it out.
std::optional<uint32_t> node_index_in(const job_layout& layout, const std::string& node);

/// The chunks node `index` of `layout` serves, over `num_shards` shards: a flat job on
/// several nodes, the chunks its ring homes there (and replicates there, with replicas);
/// a job on one node, or a hierarchical job's rack part (which sums every chunk of its
/// rack's workers), every chunk.
std::shared_ptr<const runtime::routing_table> node_routes(
  const job_spec& spec, const job_layout& layout, uint32_t index, uint32_t num_shards,
  const shard_endpoint_lists& shard_endpoints);

/// A hierarchical job's part on node `node_index` (one node per rack): the global ranks
/// whose rack it is, in rank order, and each global rank's place among them.
struct rack_part_plan {
  static constexpr uint32_t other_rack = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> local_rank;  // by global rank; other_rack: another rack's
  std::vector<uint32_t> global_rank; // by local rank
  /// What the node's shards run: a plain sum of those workers' pushes, never an
  /// optimizer step (the step ends at each chunk's home in the top level).
  job_spec spec;
};

/// The part of job `spec` on node `node_index`, whose ranks' racks are `rank_racks` (one
/// entry per rank, each a node index). Throws std::invalid_argument if `rank_racks` does
/// not hold one entry per worker.
rack_part_plan plan_rack_part(const job_spec& spec,
                              const std::vector<uint32_t>& rank_racks,
                              uint32_t node_index);

/// A hierarchical job's rack part restored from a checkpoint holds each chunk's
/// parameters and version (for its workers' pulls, and to go on from that clock) but no
/// optimizer state, which belongs to its top level, at the chunks' homes.
void drop_optimizer_state(
  std::vector<std::vector<runtime::checkpoint::chunk_record>>& shards);

/// The chunks a node settled for a move to the ring of `next`, by where each goes: its
/// home on the new ring and, with replicas, its replica there. Those this node (`node`)
/// serves on the new ring stay; the rest travel, by destination node.
struct move_split {
  std::vector<runtime::checkpoint::chunk_record> staying;
  std::map<std::string, std::vector<runtime::checkpoint::chunk_record>> leaving;
  uint64_t lowest_version = 0; // over every chunk settled (0 if none)
  uint64_t highest_version = 0;
};
move_split split_for_move(const std::vector<runtime::checkpoint::chunk_record>& settled,
                          const job_spec& spec, const job_layout& next,
                          const std::string& node);

/// The chunks a node holds after a job moved to a new ring (`routes`, node `node`'s
/// table there), by the shard that takes each: those it kept, and those other nodes
/// sent it as chunk files. Every chunk must be served here by the new ring, and as many
/// must be placed as the new ring has the node serve.
class chunk_placement {
public:
  using chunk_record = runtime::checkpoint::chunk_record;

  chunk_placement(std::shared_ptr<const runtime::routing_table> routes, std::string node);

  /// Places one chunk the node kept (moved from `r`); the reason it cannot ("" if
  /// placed).
  std::string keep(chunk_record&& r);
  /// Places every chunk of a chunk file another node sent; errc::bad_frame if the file
  /// does not decode, errc::internal if a chunk is not this node's (why in `why`).
  errc receive(const std::vector<uint8_t>& file, std::string& why);
  /// "" once every chunk the new ring has this node serve is placed, else why not.
  std::string check_complete(const std::string& job) const;

  size_t placed() const noexcept { return placed_; }
  size_t arrived() const noexcept { return arrived_; }
  /// The chunks of each shard, in the order they were placed (moved out).
  std::vector<std::vector<chunk_record>> take() { return std::move(per_shard_); }

private:
  std::string place(chunk_record& r);

  std::shared_ptr<const runtime::routing_table> routes_;
  std::string node_;
  std::vector<std::vector<chunk_record>> per_shard_;
  size_t placed_ = 0;
  size_t arrived_ = 0;
};

} // namespace rw::actors::detail
