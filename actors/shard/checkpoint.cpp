#include "actors/shard/checkpoint.hpp"

#include <fmt/format.h>

namespace rw::actors::detail {

std::string cannot_checkpoint(const shard_job& job, uint32_t tensor, uint32_t chunk,
                              const chunk_state& cs, uint64_t clock) {
  if (job.spec.consistency.model != consistency_spec::bsp)
    return fmt::format("job '{}' runs {}: only BSP jobs have one clock to checkpoint at",
                       job.spec.name, to_string(job.spec.consistency));
  if (job.relay)
    return fmt::format(
      "job '{}': a rack part of a hierarchical job holds no state of its "
      "own (checkpoint its top level)",
      job.spec.name);
  if (clock == now_clock)
    return cs.layerwise_pending()
             ? fmt::format("chunk {}/{} of job '{}' is in the middle of a step", tensor,
                           chunk, job.spec.name)
             : std::string{};
  if (cs.version() > clock)
    return fmt::format("chunk {}/{} of job '{}' is at version {}, past the checkpoint's "
                       "clock {}",
                       tensor, chunk, job.spec.name, cs.version(), clock);
  if (cs.version() == clock && cs.layerwise_pending())
    return fmt::format(
      "chunk {}/{} of job '{}' is in the middle of its step from clock {}", tensor, chunk,
      job.spec.name, clock);
  return {};
}

chunk_snapshot checkpoint_reached(shard_job& job, uint32_t tensor, uint32_t chunk,
                                  const chunk_state& cs) {
  if (!job.routes->is_owned(tensor, chunk))
    return {}; // a replica: its home's copy is the checkpoint's
  auto& all = job.checkpoints;
  for (auto it = all.begin(); it != all.end();) {
    if (it->clock != cs.version()) {
      ++it;
      continue;
    }
    it->taken.chunks->push_back(cs.snapshot(tensor, chunk));
    if (--it->remaining == 0) {
      if (it->reply)
        it->reply->deliver(it->taken);
      it = all.erase(it);
    } else {
      ++it;
    }
  }
  chunk_snapshot done;
  auto v = cs.version();
  if (job.checkpoint_every == 0 || v % job.checkpoint_every != 0)
    return done;
  auto& periodic = job.periodic[v];
  if (!periodic.chunks)
    periodic.chunks = std::make_shared<std::vector<runtime::checkpoint::chunk_record>>();
  periodic.chunks->push_back(cs.snapshot(tensor, chunk));
  if (job.routes->is_remapped() ? every_chunk_reached(job, v)
                                : periodic.chunks->size() == job.owned_chunks) {
    done = std::move(periodic);
    job.periodic.erase(v);
  }
  return done;
}

bool every_chunk_reached(const shard_job& job, uint64_t clock) {
  if (!job.incoming.empty())
    return false; // chunks on their way here may not have
  for (auto& cs : job.chunks)
    if (cs.version() < clock)
      return false;
  return true;
}

std::vector<std::pair<uint64_t, chunk_snapshot>> take_complete_periodic(shard_job& job) {
  std::vector<std::pair<uint64_t, chunk_snapshot>> done;
  for (auto it = job.periodic.begin(); it != job.periodic.end();) {
    if (every_chunk_reached(job, it->first)) {
      done.emplace_back(it->first, std::move(it->second));
      it = job.periodic.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

void fail_checkpoints(shard_job& job, const std::string& why) {
  for (auto& p : job.checkpoints)
    if (p.reply)
      p.reply->fail(errc::unavailable,
                    fmt::format("checkpoint at clock {}: {}", p.clock, why));
  job.checkpoints.clear();
}

} // namespace rw::actors::detail
