#include "actors/shard/job.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/kernels.hpp"

namespace rw::actors::detail {

int shard_job::memory_numa() const {
  if (memory && memory->size() > 0)
    return runtime::numa_node_of(memory->data());
  return chunks.empty() ? -1 : runtime::numa_node_of(chunks.front().params());
}

namespace {

void restore_chunks(shard_job& job, const job_setup& setup, uint32_t index) {
  if (setup.restore.empty())
    return;
  std::vector<bool> done(job.chunks.size(), false);
  for (auto& r : setup.restore) {
    if (r.tensor >= job.routes->num_tensors()
        || r.chunk >= job.routes->layout(r.tensor).count()
        || job.routes->shard_of(r.tensor, r.chunk) != index)
      throw std::runtime_error(fmt::format(
        "restore: chunk {}/{} is not one of shard {}'s", r.tensor, r.chunk, index));
    auto local = job.routes->local_index(r.tensor, r.chunk);
    if (auto why = job.chunks[local].restore(r); !why.empty())
      throw std::runtime_error("restore: " + why);
    done[local] = true;
  }
  auto missing = std::count(done.begin(), done.end(), false);
  if (missing != 0)
    throw std::runtime_error(
      fmt::format("restore: {} of shard {}'s chunks are missing from "
                  "the checkpoint",
                  missing, index));
}

} // namespace

shard_job make_shard_job(job_setup& setup, std::shared_ptr<job_reports> coordinator,
                         uint32_t numa) {
  const auto index = setup.shard_index;
  shard_job job;
  job.spec = std::move(setup.spec);
  job.routes = setup.routes;
  job.rescale = runtime::effective_rescale(job.spec.optimizer, job.spec.num_workers);
  job.departed.assign(job.spec.num_workers, false);
  job.counters.assign(job.spec.num_workers, rank_counters{});
  job.lateness = step_lateness(job.spec.num_workers);
  job.coordinator = std::move(coordinator);
  job.relay = std::move(setup.relay);
  job.mirror = std::move(setup.mirror);
  job.init_rank = setup.init_rank;
  job.checkpoint_every = setup.checkpoint_every;
  job.ring_version = setup.ring_version;
  // One NUMA-local arena for the job's chunks on this shard: per chunk, the
  // parameters (unless the job shares them with colocated workers) and the
  // optimizer's arrays, each starting on a cache line.
  job.shared = setup.params;
  std::vector<uint64_t> param_offsets;
  if (job.shared) {
    size_t total = 0;
    param_offsets = transports::shm::plan_params(job.spec, total);
  }
  job.peers = setup.peers;
  if (runtime::is_layerwise(job.spec.optimizer.kind) && !job.peers)
    throw std::runtime_error("a layer-wise job's shard needs the node's other shards "
                             "(job_setup::peers): its steps share a tensor's norms");
  auto state = runtime::state_arrays(job.spec.optimizer.kind);
  // d: a rack's partial (relay), or a replicated step's sum (mirror); layer-wise
  // optimizers have it already.
  const bool needs_d = runtime::is_layerwise(job.spec.optimizer.kind) || job.relay
                       || job.routes->replicated();
  auto arrays = state + (job.shared ? 0 : 1)
                + (needs_d && !runtime::is_layerwise(job.spec.optimizer.kind) ? 1 : 0);
  auto stride = [](uint32_t len) {
    return (size_t{len} * sizeof(float) + defaults::cache_line - 1) / defaults::cache_line
           * defaults::cache_line;
  };
  size_t bytes = 0;
  for (uint32_t t = 0; t < job.routes->num_tensors(); ++t) {
    auto& layout = job.routes->layout(t);
    for (uint32_t c = 0; c < layout.count(); ++c)
      if (job.routes->shard_of(t, c) == index)
        bytes += arrays * stride(layout.length(c));
  }
  job.memory = std::make_shared<runtime::numa_region>(bytes, numa);
  auto per_shard = job.routes->chunks_per_shard();
  job.chunks.reserve(per_shard[index]);
  auto* next = job.memory->data();
  auto take = [&](uint32_t len) {
    auto* p = reinterpret_cast<float*>(next);
    next += stride(len);
    return p;
  };
  for (uint32_t t = 0; t < job.routes->num_tensors(); ++t) {
    auto& layout = job.routes->layout(t);
    for (uint32_t c = 0; c < layout.count(); ++c) {
      if (job.routes->shard_of(t, c) != index)
        continue;
      auto len = layout.length(c);
      float* params = job.shared
                        ? reinterpret_cast<float*>(job.shared->data() + param_offsets[t])
                            + layout.offset(c)
                        : take(len);
      // m (momentum, Adam, LAMB, LARS), v (Adam, LAMB), d (LAMB, LARS)
      auto kind = job.spec.optimizer.kind;
      const auto kept = runtime::kept_state_arrays(kind);
      float* m = kept >= 1 ? take(len) : nullptr;
      float* v = kept >= 2 ? take(len) : nullptr;
      float* d = needs_d ? take(len) : nullptr;
      job.chunks.emplace_back(len, job.spec.num_workers, params, m, v,
                              job.spec.tensors[t].has_init, job.spec.consistency, d);
      job.owned_chunks += job.routes->is_owned(t, c) ? 1 : 0;
    }
  }
  if (job.shared) // first touch from this pinned thread puts the pages on its domain
    for (auto& cs : job.chunks)
      std::memset(const_cast<float*>(cs.params()), 0, cs.length() * sizeof(float));
  restore_chunks(job, setup, index);
  return job;
}

} // namespace rw::actors::detail
