#include "actors/shard/moves.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "runtime/layerwise.hpp"

namespace rw::actors::detail {

std::string cannot_settle(const shard_job& job) {
  if (job.spec.consistency.model != consistency_spec::bsp || job.relay)
    return fmt::format("job '{}' cannot move: only a flat BSP job's chunks settle at a "
                       "clock boundary",
                       job.spec.name);
  if (job.settle_reply || job.holding)
    return fmt::format("job '{}' is moving already", job.spec.name);
  return {};
}

settle_targets settle_reach(shard_job& job, uint32_t index) {
  settle_targets reach;
  if (!runtime::is_layerwise(job.spec.optimizer.kind))
    return reach;
  for_each_chunk(job, index, [&](uint32_t t, uint32_t c, chunk_state& cs) {
    if (job.routes->is_owned(t, c)) {
      auto& r = reach.by_tensor[t];
      r = std::max(r, cs.settle_reach());
    }
    return true;
  });
  return reach;
}

namespace {

// The version every chunk of `tensor` settles at, if the fence named one.
std::optional<uint64_t> target_of(const shard_job& job, uint32_t tensor) {
  auto it = job.settle_to.find(tensor);
  if (it == job.settle_to.end())
    return std::nullopt;
  return it->second;
}

} // namespace

bool settling_admits(const shard_job& job, uint32_t tensor, const chunk_state& cs,
                     uint64_t clock) {
  if (auto target = target_of(job, tensor))
    return clock < *target;
  return cs.settling_admits(clock);
}

void check_settled(shard_job& job, uint32_t index) {
  if (!job.settling || !job.incoming.empty()) // chunks arriving from another shard: wait
    return;
  bool all = true;
  for_each_chunk(job, index, [&](uint32_t t, uint32_t c, chunk_state& cs) {
    auto target = target_of(job, t);
    all = !job.routes->is_owned(t, c) // replicas are rebuilt from homes
          || (cs.settled() && (!target || cs.version() >= *target));
    return all;
  });
  if (!all)
    return;
  chunk_snapshot snap;
  snap.chunks = std::make_shared<std::vector<runtime::checkpoint::chunk_record>>();
  for_each_chunk(job, index, [&](uint32_t t, uint32_t c, chunk_state& cs) {
    if (job.routes->is_owned(t, c))
      snap.chunks->push_back(cs.snapshot(t, c));
    return true;
  });
  job.settling = false;
  job.frozen = true;
  if (job.settle_reply) {
    job.settle_reply->deliver(std::move(snap));
    job.settle_reply.reset();
  }
}

std::string retarget(shard_job& job, uint32_t index, const route_change& rc,
                     size_t& released) {
  auto& next = *rc.routes;
  std::vector<chunk_state> kept;
  size_t owned = 0;
  for (uint32_t t = 0; t < next.num_tensors(); ++t)
    for (uint32_t c = 0; c < next.layout(t).count(); ++c) {
      if (next.shard_of(t, c) != index)
        continue;
      if (job.routes->shard_of(t, c) != index)
        return fmt::format("job '{}': chunk {}/{} was not served by shard {} before the "
                           "takeover",
                           job.spec.name, t, c, index);
      kept.push_back(std::move(job.chunks[job.routes->local_index(t, c)]));
      owned += next.is_owned(t, c) ? 1 : 0;
    }
  released = job.chunks.size() - kept.size();
  job.chunks = std::move(kept);
  job.owned_chunks = owned;
  job.routes = rc.routes;
  if (job.kept_from == 0) // a second takeover keeps the first's floor: nothing came here
    job.kept_from = job.ring_version;
  job.ring_version = rc.ring_version;
  return {};
}

} // namespace rw::actors::detail
