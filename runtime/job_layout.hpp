#pragma once
// Where a job lives, as the cluster decides it and every node of the job holds it: its
// nodes in ring order, their addresses and racks, the ring's version, how a step
// reduces across them (flat, or hierarchical through one agg per rack), and each chunk's
// replicas. Plain data: its CAF inspection is in actors/cluster_messages.hpp, the
// decisions a node makes from it in logic/job_plan.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/defaults.hpp"

namespace rw {

/// Where a job lives: its nodes, in ring order (runtime/ring hashes their names), and
/// how a step reduces across them. One node: the job lives there alone.
struct job_layout {
  std::vector<std::string> nodes;     // names, in ring order
  std::vector<std::string> addresses; // where a worker says hello to each (HOST:PORT)
  std::vector<std::string> racks;     // each node's rack
  uint32_t vnodes = defaults::ring_vnodes;
  uint64_t ring_version = 1;
  std::string reduction = "flat"; // how the job reduces across nodes
  /// Hierarchical: the node (index into nodes, one per rack) each rank belongs to.
  /// Empty in a job placed at join until every rank has said hello.
  std::vector<uint32_t> rank_racks;
  std::string plan; // why this reduction (auto's numbers), for status
  /// Hierarchical without worker_racks: ranks are placed at join (each worker at its
  /// nearest agg), and every rank must say hello within this long of the first. 0: the
  /// map is fixed at creation.
  uint32_t join_timeout_ms = 0;
  /// A flat BSP job on several nodes: each chunk also served by this many other nodes
  /// (0 or 1; runtime::replica_on_ring), which count every push as its home does, so
  /// one that takes over when the home dies has the step in progress too.
  uint32_t replicas = 0;
};

/// A job over several nodes whose workers each talk to their own rack's node alone.
inline bool is_hierarchical(const job_layout& l) {
  return l.nodes.size() > 1 && l.reduction == "hierarchical";
}

/// A hierarchical job's top level: the job the rack-aggs take part in, one rank per
/// rack, with the chunks homed over the nodes as in a flat job. Its name and id are
/// derived from the job's, the same way on every node.
inline std::string top_job_name(const std::string& job) {
  return job + "/top";
}
constexpr uint32_t top_job_id_offset = 1u << 30;

} // namespace rw
