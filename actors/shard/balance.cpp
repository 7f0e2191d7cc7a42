#include "actors/shard/balance.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace rw::actors::detail {

std::string cannot_balance(const shard_job& job) {
  if (job.relay)
    return "a hierarchical job's rack part";
  if (job.routes->replicated())
    return "replicated (its replicas' sums are routed by the home's shards)";
  if (runtime::is_layerwise(job.spec.optimizer.kind))
    return "a layer-wise optimizer (a tensor's norms meet at its chunk 0's shard)";
  if (job.settling || job.frozen)
    return "moving between nodes";
  if (!job.checkpoints.empty())
    return "a checkpoint waits for its chunks";
  if (!job.incoming.empty())
    return "chunks are arriving already";
  if (job.timed_out)
    return "it timed out";
  return {};
}

balance_plan plan_shed(shard_book& book, uint32_t index, double share) {
  struct candidate {
    uint32_t tensor;
    uint32_t chunk;
    uint64_t load;
  };
  balance_plan plan;
  uint64_t best_load = 0;
  std::vector<candidate> best;
  for (auto& entry : book.jobs) {
    auto id = entry.first;
    auto& job =
      entry.second; // a plain reference: lambdas cannot capture a binding (C++17)
    uint64_t job_load = 0;
    std::vector<candidate> mine;
    const bool movable = cannot_balance(job).empty();
    for_each_chunk(job, index, [&](uint32_t t, uint32_t c, chunk_state& cs) {
      if (job.awaits(t, c))
        return true;
      auto load = cs.take_load();
      job_load += load;
      if (movable && load > 0)
        mine.push_back({t, c, load});
      return true;
    });
    plan.shard_load += job_load;
    if (movable && job_load > best_load) {
      best_load = job_load;
      best = std::move(mine);
      plan.job_id = id;
    }
  }
  if (best.empty()) {
    plan.why_none = plan.shard_load == 0 ? "its chunks had no load since the last plan"
                                         : "none of its jobs can move";
    return plan;
  }
  auto target = static_cast<uint64_t>(std::clamp(share, 0.0, 1.0)
                                      * static_cast<double>(plan.shard_load));
  std::stable_sort(best.begin(), best.end(), [](const candidate& a, const candidate& b) {
    return a.load > b.load;
  });
  for (auto& c : best) {
    if (plan.load + c.load > target)
      continue;
    plan.load += c.load;
    plan.chunks.push_back({c.tensor, c.chunk});
  }
  if (plan.chunks.empty())
    plan.why_none = fmt::format("its lightest movable chunk carries more than {:.0f}% of "
                                "its load",
                                share * 100);
  return plan;
}

std::string expect_chunks(shard_job& job, uint32_t index, routing_ptr next) {
  if (auto why = cannot_balance(job); !why.empty())
    return "the job cannot move: " + why;
  auto& now = *job.routes;
  if (next->num_tensors() != now.num_tensors()
      || next->total_chunks() != now.total_chunks())
    return "the new routes are of another job";
  size_t arriving = 0;
  for (uint32_t t = 0; t < now.num_tensors(); ++t)
    for (uint32_t c = 0; c < now.layout(t).count(); ++c) {
      bool here = now.shard_of(t, c) == index;
      bool stays = next->shard_of(t, c) == index;
      if (here && !stays)
        return fmt::format("the new routes take chunk {}/{} away from shard {}", t, c,
                           index);
      arriving += !here && stays ? 1 : 0;
    }
  if (arriving == 0)
    return fmt::format("the new routes give shard {} no chunk", index);
  std::vector<chunk_state> chunks;
  std::vector<bool> incoming;
  for (uint32_t t = 0; t < now.num_tensors(); ++t)
    for (uint32_t c = 0; c < now.layout(t).count(); ++c) {
      if (next->shard_of(t, c) != index)
        continue;
      if (now.shard_of(t, c) == index) {
        chunks.push_back(std::move(job.chunks[now.local_index(t, c)]));
        incoming.push_back(false);
      } else { // a place holder until the chunk's state comes (nothing reads it)
        chunks.emplace_back(now.layout(t).length(c), job.spec.num_workers, nullptr,
                            nullptr, nullptr, false, job.spec.consistency);
        incoming.push_back(true);
      }
    }
  job.chunks = std::move(chunks);
  job.incoming = std::move(incoming);
  job.routes = std::move(next);
  return {};
}

chunk_handoff give_chunks(shard_book& book, uint32_t job_id, shard_job& job,
                          uint32_t index, routing_ptr next) {
  chunk_handoff h;
  h.job_id = job_id;
  h.next = next;
  std::vector<chunk_state> kept;
  for_each_chunk(job, index, [&](uint32_t t, uint32_t c, chunk_state& cs) {
    if (next->shard_of(t, c) == index)
      kept.push_back(std::move(cs));
    else
      h.chunks.push_back({t, c, std::move(cs)});
    return true;
  });
  job.chunks = std::move(kept);
  job.owned_chunks -= std::min(job.owned_chunks, h.chunks.size());
  job.routes = std::move(next);
  for (auto it = book.backlog.begin(); it != book.backlog.end();) {
    auto& p = it->second;
    if (p.job_id == job_id && job.routes->shard_of(p.tensor, p.chunk) != index) {
      h.backlog.push_back(std::move(p));
      it = book.backlog.erase(it);
    } else {
      ++it;
    }
  }
  h.arenas.push_back(job.memory);
  h.arenas.insert(h.arenas.end(), job.borrowed.begin(), job.borrowed.end());
  return h;
}

std::vector<shard_job::stashed> take_chunks(shard_job& job, chunk_handoff& h,
                                            std::string& error) {
  std::vector<shard_job::stashed> serve;
  if (h.next != job.routes || job.incoming.empty()) {
    error = "the chunks come by routes this shard was not told to expect";
    return serve;
  }
  for (auto& m : h.chunks) {
    auto i = job.routes->local_index(m.tensor, m.chunk);
    if (i >= job.incoming.size() || !job.incoming[i]) {
      error = fmt::format("chunk {}/{} was not expected here", m.tensor, m.chunk);
      return serve;
    }
  }
  for (auto& m : h.chunks) {
    auto i = job.routes->local_index(m.tensor, m.chunk);
    job.chunks[i] = std::move(m.state);
    job.incoming[i] = false;
  }
  job.owned_chunks += h.chunks.size();
  for (auto& a : h.arenas)
    if (a != job.memory
        && std::find(job.borrowed.begin(), job.borrowed.end(), a) == job.borrowed.end())
      job.borrowed.push_back(a);
  if (std::find(job.incoming.begin(), job.incoming.end(), true) == job.incoming.end())
    job.incoming.clear();
  else
    error = "some expected chunks did not come";
  serve.reserve(h.backlog.size() + job.stash.size());
  for (auto& p : h.backlog)
    serve.push_back({shard_job::stashed::a_push, std::move(p), {}});
  for (auto& s : job.stash)
    serve.push_back(std::move(s));
  job.stash.clear();
  return serve;
}

} // namespace rw::actors::detail
