#pragma once
// What rw-node --metrics serves: a node's state in the Prometheus text format, asked of
// its actors at each scrape (their answers bounded in time), and whether it is ready.
// Metric names and labels are listed in docs/operations.md ("Metric names").

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>

namespace rw::actors {

class rack_agg_node;
class coordinator_node;

/// How long a scrape waits for each actor's answer; one that does not answer in time
/// is left out and counted in rw_metrics_missing_answers.
inline constexpr std::chrono::milliseconds metrics_answer_timeout{2000};

/// The node's metrics: process, shards, endpoints, jobs, and (with `cluster`, the
/// coordinator it embeds or is) the cluster's nodes and jobs. Either may be null.
std::string render_metrics(caf::actor_system& sys, const std::string& node_name,
                           const std::string& role, const rack_agg_node* node,
                           const coordinator_node* cluster);

/// A node's running totals, for the periodic throughput line (rw-node
/// --stats-interval-s): read from its shards, pollers and rack coordinator.
struct node_totals {
  uint64_t bytes_in = 0;    // gradient bytes the shards took
  uint64_t bytes_out = 0;   // update bytes they sent
  uint64_t steps = 0;       // chunk steps completed
  uint64_t connections = 0; // open on every endpoint
  uint64_t jobs = 0;        // live jobs
  uint64_t missing = 0;     // actors that did not answer in time
};
node_totals read_totals(caf::actor_system& sys, const rack_agg_node& node);

/// One line: the rates between two readings `seconds` apart, and the node's state now
/// (connections, jobs, resident memory).
std::string throughput_line(const node_totals& before, const node_totals& now,
                            double seconds);

/// Ready to serve (/readyz): "" if so, else why not. A rack-agg is ready once every
/// poller answers and its cluster link is registered; a coordinator, once it answers.
std::string not_ready(caf::actor_system& sys, const rack_agg_node* node,
                      const coordinator_node* cluster);

} // namespace rw::actors
