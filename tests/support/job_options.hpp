#pragma once
// The worker options integration tests use for small jobs on a local node.

#include <string>
#include <vector>

#include "rackweave/worker.hpp"

namespace rw::testing {

/// The transports every protocol suite runs over, as Gloo runs each algorithm over each
/// transport. "fabric" is libfabric's tcp provider: its node needs fabric_node_args().
inline const std::vector<std::string>& protocol_transports() {
  static const std::vector<std::string> all{"tcp", "shm", "fabric"};
  return all;
}
/// rw-node options for a node that serves all of protocol_transports().
inline std::vector<std::string> fabric_node_args() {
  return {"--fabric", "tcp"};
}

/// A `workers`-rank job named `job` with one float32 tensor "t" of `elements`, 4 KiB
/// chunks (1024 elements each), 20 s request timeout.
inline worker_options job_options(const std::string& address, const std::string& job,
                                  uint32_t rank, const std::string& transport,
                                  uint64_t elements, uint32_t workers = 2) {
  worker_options o;
  o.connect = address;
  o.rank = rank;
  o.transport = transport;
  o.job.name = job;
  o.job.num_workers = workers;
  o.job.chunk_bytes = 4096;
  o.job.tensors = {{"t", elements, false}};
  o.request_timeout = std::chrono::seconds(20);
  return o;
}

} // namespace rw::testing
