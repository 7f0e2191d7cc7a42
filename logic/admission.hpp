#pragma once
// What a rack coordinator checks before a worker joins its job, as plain functions with
// no actor in them: a hello's spec taken from the job when the worker states only its
// name, the spec checked against the node's limits (its size in node memory included),
// and the open-job quota of the worker's host. The rack coordinator
// (actors/rack/admission.cpp) calls them, then answers, logs and forwards; the proofs of
// further connections are counted by attach_ledger (logic/attach_ledger.hpp). Tests:
// tests/unit/test_admission_rules.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"

namespace rw::actors::detail {

/// A hello refused: the code and reason the worker is told, and the node's log line
/// (after "hello refused: peer=HOST:PORT"), with `reason` the line's fixed text that
/// log_limited keys on (logic/limited_log.hpp). Code errc::ok: not refused.
struct admission_refusal {
  errc code = errc::ok;
  std::string why;
  std::string log;
  std::string reason;
  explicit operator bool() const { return code != errc::ok; }
};

/// The node's limits on what a hello may ask for (rw-node's options).
struct admission_limits {
  std::string node_name;
  uint32_t max_chunk_bytes = 0;
  uint32_t max_workers = 0;
  uint64_t max_job_bytes = 0;          // --max-job-mib
  uint32_t max_open_jobs_per_peer = 0; // 0: no limit
  uint64_t max_open_jobs_bytes = 0;    // --max-open-jobs-mib, every open job; 0: none
};

/// Bytes of node memory a job takes: parameters and optimizer state, each chunk's arrays
/// on whole cache lines, and each chunk's bookkeeping on its shard.
uint64_t job_footprint(const job_spec& spec);

/// A hello that states only its job's name (`from_job`) takes the job's spec: the
/// running job's on this node (`running`), else its live grant's (`granted`) with the
/// tensors the worker declares when the grant has none. Tensors the worker declares
/// for a job that has them must be the same. `stated` becomes the spec to check; a null
/// job is one the node does not have.
admission_refusal resolve_spec(job_spec& stated, bool from_job, uint32_t rank,
                               const job_spec* running, const job_spec* granted,
                               const admission_limits& limits);

/// A hello on its own: a valid spec, a rank inside it, a footprint within the node's
/// --max-job-mib, or within `reserved` bytes when the job was created with less
/// (a tenant's memory; 0: none).
admission_refusal check_hello(const job_spec& spec, uint32_t rank,
                              const admission_limits& limits, uint64_t reserved = 0);

/// A hello that would create an open job on the node: refused once the workers of
/// `host` created max_open_jobs_per_peer live open jobs here (`theirs`, by name).
admission_refusal check_open_job_quota(const std::string& host,
                                       const std::vector<std::string>& theirs,
                                       const job_spec& spec, uint32_t rank,
                                       const admission_limits& limits);

/// A hello that would create an open job on the node: refused when its footprint and
/// the `held` bytes of the node's live open jobs (`open`, by name) together pass
/// max_open_jobs_bytes (strangers' hellos create open jobs: without a node-wide bound,
/// 16 jobs per host, each up to --max-job-mib).
admission_refusal check_open_jobs_budget(uint64_t held,
                                         const std::vector<std::string>& open,
                                         const job_spec& spec, uint32_t rank,
                                         const admission_limits& limits);

} // namespace rw::actors::detail
