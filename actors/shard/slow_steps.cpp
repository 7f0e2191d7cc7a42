#include "actors/shard/slow_steps.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace rw::actors::detail {

slow_steps find_slow_steps(const shard_job& job, uint32_t index,
                           std::chrono::steady_clock::time_point now,
                           std::chrono::milliseconds threshold) {
  slow_steps out;
  if (threshold.count() == 0 || job.spec.consistency.model != consistency_spec::bsp
      || job.chunks.empty() || !job.routes)
    return out;
  auto& routes = *job.routes;
  for (uint32_t t = 0; t < routes.num_tensors(); ++t)
    for (uint32_t c = 0; c < routes.layout(t).count(); ++c) {
      if (routes.shard_of(t, c) != index || !routes.is_owned(t, c) || job.awaits(t, c))
        continue;
      auto& cs = job.chunks[routes.local_index(t, c)];
      if (!cs.step_open() || now - cs.opened_at() < threshold)
        continue;
      auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(
        now - cs.opened_at());
      out.clock = std::min(out.clock, cs.version());
      out.waited = std::max(out.waited, waited);
      for (auto r : cs.missing_ranks()) {
        auto& w = out.ranks[r];
        w.waited = std::max(w.waited, waited);
        ++w.chunks;
        if (w.named.size() < slow_steps::max_named)
          w.named.emplace_back(t, c);
      }
    }
  return out;
}

std::string slow_steps_text(const slow_steps& s) {
  std::string out;
  for (auto& [rank, w] : s.ranks) {
    if (!out.empty())
      out += ", ";
    out += fmt::format("rank {} ({} chunk{}: ", rank, w.chunks, w.chunks == 1 ? "" : "s");
    for (size_t i = 0; i < w.named.size(); ++i)
      out += fmt::format("{}{}/{}", i ? ", " : "", w.named[i].first, w.named[i].second);
    if (w.chunks > w.named.size())
      out += fmt::format(" and {} more", w.chunks - w.named.size());
    out += ')';
  }
  return out;
}

} // namespace rw::actors::detail
