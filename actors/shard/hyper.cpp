#include "actors/shard/hyper.hpp"

#include <algorithm>

namespace rw::actors::detail {

uint64_t prepare_hyper(shard_job& job, uint64_t id, const hyper_change& change) {
  job.pending_hyper[id] = change;
  uint64_t highest = 0;
  for (auto& cs : job.chunks)
    highest = std::max(highest, cs.version());
  return highest;
}

bool end_hyper(shard_job& job, uint64_t id, bool apply) {
  auto it = job.pending_hyper.find(id);
  if (it == job.pending_hyper.end())
    return false;
  if (apply)
    job.spec.schedule.push_back(it->second);
  job.pending_hyper.erase(it);
  return true;
}

uint64_t held_from(const shard_job& job) {
  uint64_t lowest = UINT64_MAX;
  for (auto& [id, change] : job.pending_hyper)
    lowest = std::min(lowest, change.at_clock);
  return lowest;
}

} // namespace rw::actors::detail
