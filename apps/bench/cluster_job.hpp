#pragma once
// rw-bench's job, created through the cluster coordinator as an operator would (the
// coordinator is found through any node's --listen address): placed on the racks the
// workers come from (or on the node the benchmark was pointed at), with its token
// handed to the worker processes in a 0600 file, and deleted when the run is over.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rackweave/job_spec.hpp"

namespace rw::bench {

struct cluster_job_request {
  std::string connect;                   // any node's --listen address
  std::string secret_file;               // --cluster-secret-file ("" = none)
  job_spec spec;                         // without tensors
  std::vector<std::string> worker_racks; // per rank; empty: every worker at `connect`
  /// Per rank, the workers' rack options (empty: none). Without worker_racks the job
  /// goes on these racks' nodes, and a hierarchical job places each rank at join.
  std::vector<std::string> rack_options;
  std::string reduction = "auto";
  int replicas = -1;             // -1: the coordinator's default
  uint64_t checkpoint_every = 0; // periodic checkpoints into checkpoint_dir (0: none)
  std::string checkpoint_dir;
  std::chrono::milliseconds timeout{10'000};
};

class cluster_job {
public:
  /// Creates the job; throws std::runtime_error saying why it could not.
  explicit cluster_job(cluster_job_request req);
  /// Deletes the job (a failure is reported on stderr, not thrown).
  ~cluster_job();

  /// The node address rank `rank` says hello to: a node of its rack, else `connect`.
  const std::string& connect_of(uint32_t rank) const;
  /// A 0600 file holding the job's token, for the workers.
  const std::string& token_file() const;
  /// The job's nodes and how it reduces across them, as the coordinator placed it.
  const std::vector<std::string>& nodes() const;
  const std::string& reduction() const;
  /// Hierarchical: each rank's rack (index in nodes()), fixed at creation or, for a job
  /// placed at join, where the workers' rack options put them; empty otherwise.
  const std::vector<uint32_t>& rank_racks() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace rw::bench
