// A job's clock and step times on the node (rack/state.hpp, "rack/steps.cpp"), from
// the shards' step_atom reports, and the jobs' gauges /metrics shows.

#include <caf/all.hpp>

#include "actors/rack/state.hpp"

namespace rw::actors::detail {

namespace {

// Which shards hold chunks of the job by its current routes (the others never report).
void track_routes(job_info& job, uint32_t shards) {
  if (job.clocked_routes == job.routes)
    return;
  job.clocked_routes = job.routes;
  std::vector<uint64_t> clocks(shards, UINT64_MAX);
  if (job.routes)
    for (uint32_t t = 0; t < job.routes->num_tensors(); ++t)
      for (uint32_t c = 0; c < job.routes->layout(t).count(); ++c) {
        auto s = job.routes->shard_of(t, c);
        if (s < shards && clocks[s] == UINT64_MAX)
          clocks[s] = s < job.shard_clock.size() && job.shard_clock[s] != UINT64_MAX
                        ? job.shard_clock[s]
                        : 0;
      }
  job.shard_clock = std::move(clocks);
}

} // namespace

void on_step(rack_ptr self, uint32_t job_id, uint32_t shard, uint64_t clock) {
  auto* job = live_job(self->state, job_id);
  if (job == nullptr)
    return; // it ended meanwhile
  track_routes(*job, static_cast<uint32_t>(self->state.shards.size()));
  if (shard >= job->shard_clock.size() || job->shard_clock[shard] == UINT64_MAX)
    return; // a report by routes the job has left
  job->shard_clock[shard] = std::max(job->shard_clock[shard], clock);
  auto lowest = UINT64_MAX;
  for (auto c : job->shard_clock)
    lowest = std::min(lowest, c);
  if (lowest == UINT64_MAX || lowest <= job->clock)
    return;
  auto now = std::chrono::steady_clock::now();
  // The first clock has no step before it to measure from; a jump of several clocks at
  // once (chunks moved here with their state) is not one step either.
  if (job->clock_at != std::chrono::steady_clock::time_point{}
      && lowest == job->clock + 1)
    job->steps.observe(std::chrono::duration<double>(now - job->clock_at).count());
  job->clock = lowest;
  job->clock_at = now;
}

std::vector<job_gauge> job_gauges(const rack_state& st) {
  std::vector<job_gauge> out;
  for (auto& [name, job] : st.jobs) {
    job_gauge g;
    g.id = job.id;
    g.name = name;
    const auto& info = job; // a structured binding: no lambda may capture it (C++17)
    auto c = info.ranks.count([&info](uint32_t r) { return info.belongs(r); });
    g.ranks = c.ranks;
    g.live = c.live;
    g.away = c.away;
    g.clock = job.clock;
    g.steps = job.steps;
    g.global_rank = job.global_rank;
    out.push_back(std::move(g));
  }
  return out;
}

} // namespace rw::actors::detail
