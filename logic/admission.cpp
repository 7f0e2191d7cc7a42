// What a rack coordinator checks before a worker joins (logic/admission.hpp).

#include "logic/admission.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "logic/chunk_state.hpp"
#include "runtime/chunking.hpp"
#include "runtime/kernels.hpp"

namespace rw::actors::detail {

namespace {

admission_refusal refused(errc code, std::string why, std::string log,
                          std::string reason) {
  return {code, std::move(why), std::move(log), std::move(reason)};
}

// A rank's refusal logged as "hello refused: peer=... rank=R: WHY".
admission_refusal refused_rank(errc code, uint32_t rank, std::string why) {
  auto log = fmt::format(" rank={}: {}", rank, why);
  return refused(code, std::move(why), std::move(log),
                 "hello refused: peer={} rank={}: {}");
}

} // namespace

uint64_t job_footprint(const job_spec& spec) {
  uint64_t footprint = 0;
  const uint64_t arrays = 1 + runtime::state_arrays(spec.optimizer.kind);
  for (auto& t : spec.tensors) {
    runtime::chunk_layout layout{t.elements, spec.chunk_bytes};
    const uint64_t full = (uint64_t{layout.chunk_elems} * sizeof(float) + 63) / 64 * 64;
    const uint64_t count = layout.count();
    const uint64_t last =
      (uint64_t{layout.length(layout.count() - 1)} * sizeof(float) + 63) / 64 * 64;
    footprint += arrays * ((count - 1) * full + last) + count * sizeof(chunk_state);
  }
  return footprint;
}

admission_refusal resolve_spec(job_spec& stated, bool from_job, uint32_t rank,
                               const job_spec* running, const job_spec* granted,
                               const admission_limits& limits) {
  if (!from_job)
    return {};
  auto name = stated.name;
  auto declared = std::move(stated.tensors);
  if (running) {
    stated = *running;
  } else if (granted) {
    stated = *granted;
    if (stated.tensors.empty())
      stated.tensors = declared;
  } else {
    stated.tensors = std::move(declared);
    return refused_rank(errc::unknown_job, rank,
                        fmt::format("no job named '{}' on node {}: a worker that states "
                                    "no spec joins a job created through the cluster "
                                    "(rw.job_create, rackweave.create_job) or already "
                                    "running here",
                                    name, limits.node_name));
  }
  if (stated.tensors.empty())
    return refused_rank(errc::invalid_spec, rank,
                        fmt::format("job '{}' has no tensors yet: the first worker to "
                                    "join declares them (worker_options.job.tensors; "
                                    "Python: tensors=...)",
                                    name));
  if (!declared.empty()) {
    auto theirs = stated;
    theirs.tensors = std::move(declared);
    if (auto diff = describe_mismatch(stated, theirs); !diff.empty())
      return refused_rank(errc::spec_mismatch, rank, std::move(diff));
  }
  return {};
}

admission_refusal check_hello(const job_spec& spec, uint32_t rank,
                              const admission_limits& limits, uint64_t reserved) {
  if (auto why = validate(spec, limits.max_chunk_bytes, limits.max_workers); !why.empty())
    return refused(errc::invalid_spec, "invalid job spec: " + why,
                   fmt::format(" job='{}': invalid job spec: {}", spec.name, why),
                   "hello refused: peer={} job='{}': invalid job spec: {}");
  if (rank >= spec.num_workers)
    return refused(errc::bad_rank,
                   fmt::format("rank {} is outside 0..{}", rank, spec.num_workers - 1),
                   fmt::format(" job='{}': rank {} outside 0..{}", spec.name, rank,
                               spec.num_workers - 1),
                   "hello refused: peer={} job='{}': rank {} outside 0..{}");
  uint64_t limit = limits.max_job_bytes;
  std::string source = fmt::format("this node allows {} MiB per job (--max-job-mib)",
                                   limit >> 20);
  if (reserved != 0 && reserved < limit) {
    limit = reserved;
    source = fmt::format("the job was created with memory = {} MiB (rw.job_create): "
                         "create it with more",
                         limit >> 20);
  }
  if (auto footprint = job_footprint(spec); footprint > limit) {
    auto why = fmt::format("job '{}' needs {} MiB of node memory for parameters, "
                           "optimizer state and per-chunk bookkeeping; {}",
                           spec.name, footprint >> 20, source);
    auto log = ": " + why;
    return refused(errc::invalid_spec, std::move(why), std::move(log),
                   "hello refused: peer={}: {}");
  }
  return {};
}

admission_refusal check_open_job_quota(const std::string& host,
                                       const std::vector<std::string>& theirs,
                                       const job_spec& spec, uint32_t rank,
                                       const admission_limits& limits) {
  auto limit = limits.max_open_jobs_per_peer;
  if (limit == 0 || theirs.size() < limit)
    return {};
  auto why = fmt::format(
    "host {} has created {} live jobs on node {} already (at most "
    "{}, --max-open-jobs-per-peer): finish or stop one of [{}] first",
    host, theirs.size(), limits.node_name, limit, fmt::join(theirs, ", "));
  auto log = fmt::format(" job='{}' rank={}: {}", spec.name, rank, why);
  return refused(errc::too_many_requests, std::move(why), std::move(log),
                 "hello refused: peer={} job='{}' rank={}: {}");
}

admission_refusal check_open_jobs_budget(uint64_t held,
                                         const std::vector<std::string>& open,
                                         const job_spec& spec, uint32_t rank,
                                         const admission_limits& limits) {
  auto limit = limits.max_open_jobs_bytes;
  auto wanted = job_footprint(spec);
  if (limit == 0 || held + wanted <= limit)
    return {};
  auto mib = [](uint64_t b) { return (b + (1u << 20) - 1) >> 20; };
  auto why = fmt::format(
    "job '{}' needs {} MiB and the {} live open job(s) on node {} hold {} MiB of the "
    "{} MiB all open jobs may take (--max-open-jobs-mib): finish or stop one of [{}] "
    "first, or create the job with rw.job_create",
    spec.name, mib(wanted), open.size(), limits.node_name, mib(held), limit >> 20,
    fmt::join(open, ", "));
  auto log = fmt::format(" job='{}' rank={}: {}", spec.name, rank, why);
  return refused(errc::too_many_requests, std::move(why), std::move(log),
                 "hello refused: peer={} job='{}' rank={}: open jobs' memory");
}

} // namespace rw::actors::detail
