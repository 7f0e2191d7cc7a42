// What a node holds of a job (logic/job_plan.hpp): its place on the job's ring, its
// routing table, a hierarchical job's rack part, and where a moved job's chunks go.

#include "logic/job_plan.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/ring.hpp"

namespace rw::actors::detail {

std::optional<uint32_t> node_index_in(const job_layout& layout, const std::string& node) {
  auto at = std::find(layout.nodes.begin(), layout.nodes.end(), node);
  if (at == layout.nodes.end())
    return std::nullopt;
  return static_cast<uint32_t>(at - layout.nodes.begin());
}

std::shared_ptr<const runtime::routing_table> node_routes(
  const job_spec& spec, const job_layout& layout, uint32_t index, uint32_t num_shards,
  const shard_endpoint_lists& shard_endpoints) {
  if (layout.nodes.size() > 1 && !is_hierarchical(layout)) {
    runtime::hash_ring ring{layout.nodes, layout.vnodes, layout.ring_version};
    return std::make_shared<runtime::routing_table>(spec, num_shards, shard_endpoints,
                                                    &ring, index, layout.replicas);
  }
  return std::make_shared<runtime::routing_table>(spec, num_shards, shard_endpoints);
}

rack_part_plan plan_rack_part(const job_spec& spec,
                              const std::vector<uint32_t>& rank_racks,
                              uint32_t node_index) {
  if (rank_racks.size() != spec.num_workers)
    throw std::invalid_argument(
      fmt::format("job '{}': the rack of {} rank(s) is known, of {} workers", spec.name,
                  rank_racks.size(), spec.num_workers));
  rack_part_plan plan;
  plan.local_rank.assign(spec.num_workers, rack_part_plan::other_rack);
  for (uint32_t r = 0; r < spec.num_workers; ++r)
    if (rank_racks[r] == node_index) {
      plan.local_rank[r] = static_cast<uint32_t>(plan.global_rank.size());
      plan.global_rank.push_back(r);
    }
  plan.spec = spec;
  plan.spec.num_workers = static_cast<uint32_t>(plan.global_rank.size());
  plan.spec.optimizer = optimizer_spec{};
  plan.spec.optimizer.kind = optimizer_kind::sum;
  plan.spec.optimizer.rescale = 1.0f;
  return plan;
}

void drop_optimizer_state(
  std::vector<std::vector<runtime::checkpoint::chunk_record>>& shards) {
  for (auto& shard : shards)
    for (auto& r : shard) {
      r.m.clear();
      r.v.clear();
    }
}

move_split split_for_move(const std::vector<runtime::checkpoint::chunk_record>& settled,
                          const job_spec& spec, const job_layout& next,
                          const std::string& node) {
  move_split out;
  if (settled.empty())
    return out;
  runtime::hash_ring ring{next.nodes, next.vnodes, next.ring_version};
  bool replicated = next.replicas > 0 && next.nodes.size() > 1;
  out.lowest_version = UINT64_MAX;
  for (auto& r : settled) {
    out.lowest_version = std::min(out.lowest_version, r.version);
    out.highest_version = std::max(out.highest_version, r.version);
    std::vector<const std::string*> to{
      &next.nodes[runtime::home_on_ring(ring, spec, r.tensor, r.chunk)]};
    if (replicated)
      to.push_back(&next.nodes[runtime::replica_on_ring(ring, spec, r.tensor, r.chunk)]);
    for (auto* dest : to) {
      if (*dest == node)
        out.staying.push_back(r);
      else
        out.leaving[*dest].push_back(r);
    }
  }
  return out;
}

chunk_placement::chunk_placement(std::shared_ptr<const runtime::routing_table> routes,
                                 std::string node)
  : routes_(std::move(routes)), node_(std::move(node)),
    per_shard_(routes_->num_shards()) {}

std::string chunk_placement::place(chunk_record& r) {
  if (r.tensor >= routes_->num_tensors() || r.chunk >= routes_->layout(r.tensor).count()
      || !routes_->is_local(r.tensor, r.chunk))
    return fmt::format("chunk {}/{} is not homed on node {} by the new ring", r.tensor,
                       r.chunk, node_);
  per_shard_[routes_->shard_of(r.tensor, r.chunk)].push_back(std::move(r));
  ++placed_;
  return {};
}

std::string chunk_placement::keep(chunk_record&& r) {
  return place(r);
}

errc chunk_placement::receive(const std::vector<uint8_t>& file, std::string& why) {
  runtime::checkpoint::chunk_file f;
  try {
    f = runtime::checkpoint::decode_chunk_file(file, "chunks moved to " + node_);
  } catch (const std::exception& e) {
    why = e.what();
    return errc::bad_frame;
  }
  for (auto& r : f.chunks) {
    why = place(r);
    if (!why.empty())
      return errc::internal;
    ++arrived_;
  }
  return errc::ok;
}

std::string chunk_placement::check_complete(const std::string& job) const {
  auto served = routes_->local_chunks() + routes_->replica_chunks();
  if (placed_ == served)
    return {};
  return fmt::format(
    "job '{}': node {} has {} of the {} chunks the new ring has it serve", job, node_,
    placed_, served);
}

} // namespace rw::actors::detail
