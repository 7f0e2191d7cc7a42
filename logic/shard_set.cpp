// Which of a node's shards serve a job (logic/shard_set.hpp).

#include "logic/shard_set.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace rw::actors::detail {

shard_share_choice choose_bytes_per_shard(bool is_auto, uint64_t asked_kib,
                                          uint32_t shards) {
  if (!is_auto) {
    if (asked_kib == 0)
      return {0, "0: every job is served by every shard"};
    return {asked_kib << 10, fmt::format("a shard per {} KiB of a job's parameters (at "
                                         "least one, at most all {})",
                                         asked_kib, shards)};
  }
  if (shards < narrow_from_shards)
    return {0, fmt::format("auto: every job is served by every shard (fewer than {} "
                           "shards: {})",
                           narrow_from_shards, shards)};
  return {auto_bytes_per_shard,
          fmt::format("auto: a shard per {} KiB of a job's parameters, at least one, at "
                      "most all {} ({} shards or more: a step pays for every shard it "
                      "touches)",
                      auto_bytes_per_shard >> 10, shards, narrow_from_shards)};
}

void add_load(const runtime::routing_table& routes, std::vector<uint64_t>& load) {
  if (load.size() < routes.num_shards())
    load.resize(routes.num_shards(), 0);
  for (uint32_t t = 0; t < routes.num_tensors(); ++t) {
    auto& layout = routes.layout(t);
    for (uint32_t c = 0; c < layout.count(); ++c)
      if (routes.is_local(t, c))
        load[routes.shard_of(t, c)] += uint64_t{layout.length(c)} * sizeof(float);
  }
}

shard_set narrow_job(const runtime::routing_table& routes, uint64_t bytes_per_shard,
                     const std::vector<std::vector<uint32_t>>& shard_endpoints,
                     const std::vector<uint64_t>& load) {
  auto n = routes.num_shards();
  shard_set out;
  for (uint32_t s = 0; s < n; ++s)
    out.shards.push_back(s);
  if (bytes_per_shard == 0) {
    out.why = fmt::format("all {}", n);
    return out;
  }
  // The groups: shards serving the same endpoints, in shard order.
  std::map<std::vector<uint32_t>, std::vector<uint32_t>> groups;
  std::vector<const std::vector<uint32_t>*> group_of(n);
  static const std::vector<uint32_t> one_group;
  for (uint32_t s = 0; s < n; ++s) {
    auto& key = s < shard_endpoints.size() ? shard_endpoints[s] : one_group;
    auto& members = groups[key];
    members.push_back(s);
    group_of[s] = &members;
  }
  // Each group's chunks of the job, in (tensor, index) order, and their bytes.
  struct chunk_ref {
    uint32_t tensor, chunk, shard;
  };
  std::map<const std::vector<uint32_t>*, std::vector<chunk_ref>> chunks;
  std::map<const std::vector<uint32_t>*, uint64_t> bytes;
  uint64_t total = 0;
  for (uint32_t t = 0; t < routes.num_tensors(); ++t) {
    auto& layout = routes.layout(t);
    for (uint32_t c = 0; c < layout.count(); ++c) {
      if (!routes.is_local(t, c))
        continue;
      auto s = routes.shard_of(t, c);
      chunks[group_of[s]].push_back({t, c, s});
      auto b = uint64_t{layout.length(c)} * sizeof(float);
      bytes[group_of[s]] += b;
      total += b;
    }
  }
  auto load_of = [&](uint32_t s) { return s < load.size() ? load[s] : uint64_t{0}; };
  std::vector<uint32_t> chosen_all;
  for (auto& [key, members] : groups) {
    auto found = chunks.find(&members);
    if (found == chunks.end())
      continue; // none of the job's chunks here
    auto want = (bytes[&members] + bytes_per_shard - 1) / bytes_per_shard;
    auto k = static_cast<size_t>(std::clamp<uint64_t>(want, 1, members.size()));
    if (k == members.size()) { // as wide as the group: the chunks stay
      chosen_all.insert(chosen_all.end(), members.begin(), members.end());
      continue;
    }
    auto order = members;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return load_of(a) < load_of(b); });
    order.resize(k);
    std::sort(order.begin(), order.end());
    chosen_all.insert(chosen_all.end(), order.begin(), order.end());
    size_t i = 0;
    for (auto& ref : found->second) {
      auto target = order[i++ % k];
      if (target != ref.shard)
        out.moves.push_back({ref.tensor, ref.chunk, target});
    }
  }
  std::sort(chosen_all.begin(), chosen_all.end());
  if (chosen_all.size() == n || chosen_all.empty()) {
    out.moves.clear();
    out.why = fmt::format("all {} ({} KiB of parameters here, {} KiB per shard at least)",
                          n, (total + 1023) >> 10, bytes_per_shard >> 10);
    return out;
  }
  out.shards = std::move(chosen_all);
  out.why = fmt::format("{} of {} ({} KiB of parameters here, a shard per {} KiB)",
                        out.shards.size(), n, (total + 1023) >> 10,
                        bytes_per_shard >> 10);
  return out;
}

} // namespace rw::actors::detail
