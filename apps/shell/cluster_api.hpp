#pragma once
// What the shell's `rw` Lua module asks of the cluster: one call per request to the
// cluster coordinator. Every call either returns the answer or throws shell_error with
// a message fit to show the user (unknown job, refused spec, coordinator unreachable,
// no answer within the timeout). Implemented by cluster_client (the coordinator over
// CAF's middleman); tests may give the Lua layer another implementation.

#include <stdexcept>
#include <string>
#include <vector>

#include "actors/cluster_messages.hpp"
#include "rackweave/errc.hpp"

namespace rw::shell {

class shell_error : public std::runtime_error {
public:
  /// `code`: the coordinator's reason (a refusal), or unavailable / timeout when it
  /// could not be reached or did not answer.
  explicit shell_error(const std::string& message, errc code = errc::unavailable)
    : std::runtime_error(message), code_(code) {}
  errc code() const noexcept { return code_; }

private:
  errc code_;
};

class cluster_api {
public:
  virtual ~cluster_api() = default;

  /// The live rack-agg nodes.
  virtual std::vector<actors::node_info> nodes() = 0;
  /// Every job the registry holds, in creation order.
  virtual std::vector<actors::job_report> jobs() = 0;
  /// Creates a job (its tensors, or none: the first worker declares them) where
  /// `placement` says (all empty: the coordinator picks one node).
  virtual actors::job_created job_create(const job_spec& spec,
                                         const actors::job_placement& placement) = 0;
  virtual actors::job_report job_status(const std::string& name) = 0;
  virtual actors::job_report job_stop(const std::string& name) = 0;
  /// Changes the running job's hyper-parameters from change.at_clock on, on every node
  /// of the job or on none; returns the highest clock its chunks had reached.
  virtual uint64_t job_set(const std::string& name, const hyper_change& change) = 0;
  virtual void job_delete(const std::string& name) = 0;
  /// Writes a checkpoint of the job into `dir` (a new or empty directory) at `clock`
  /// (0: the coordinator picks the next clock; a finished job: as it ended).
  virtual actors::checkpoint_info checkpoint(const std::string& name,
                                             const std::string& dir, uint64_t clock) = 0;
  /// Fault injection (tests, demos) into job `name` on node `node` ("": the job's first
  /// node): kill = "shard" crashes shard `index`; kill = "link" closes the connections
  /// of the job's worker rank `index` (UINT32_MAX: every rank); returns what was done.
  virtual std::string inject(const std::string& name, const std::string& kill,
                             const std::string& node, uint32_t index) = 0;
  /// Drains node `name`: it takes no new jobs, and every flat BSP job on several nodes
  /// moves its chunks homed there, with their state, to the other nodes while it
  /// trains; returns what moved and what stayed.
  virtual std::string node_drain(const std::string& name) = 0;
  /// Joins node `name` to the running jobs: it takes new jobs (again, after a drain),
  /// and every flat BSP job on two nodes or more moves the chunks the ring with it homes
  /// there, with their state, onto it while it trains; returns what moved and what stayed.
  virtual std::string node_join(const std::string& name) = 0;
  /// Where the coordinator is (HOST:PORT of its control address), for the prompt.
  virtual std::string coordinator() const = 0;
};

} // namespace rw::shell
