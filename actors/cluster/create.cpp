// Creating a job: its spec checked (a duplicate name refused), placed on one or several
// nodes, its core links probed where the reduction is `auto`, registered and granted
// to its nodes with its token. The registry's other half is cluster/jobs.cpp.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"
#include "actors/cluster/state.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

job_layout layout_of(const std::vector<const member*>& nodes) {
  job_layout l;
  for (auto* m : nodes) {
    l.nodes.push_back(m->info.name);
    l.addresses.push_back(m->info.endpoints.front());
    l.racks.push_back(m->info.rack);
  }
  return l;
}

namespace {

using created_promise = caf::typed_response_promise<job_created>;

caf::error duplicate(const job_entry& old) {
  return cluster_error(
    errc::duplicate_name,
    fmt::format("a job named '{}' exists already (state {}); delete it "
                "first (rw.job_delete) or pick another name",
                old.report.name, old.report.state));
}

// Places the job (again: nodes may have come or gone while its core links were
// probed), plans its reduction with `probes`, registers it and grants it to its
// nodes; answers `rp` with the job and its token, or why not.
void place_and_grant(cluster_ptr self, created_promise rp, job_spec spec,
                     const job_placement& placement, const core_probes& probes,
                     const std::string& by) {
  auto& st = self->state;
  if (auto* old = job_named(self, spec.name)) {
    rp.deliver(duplicate(*old));
    return;
  }
  // Again: another job of the tenant may have been created while links were probed.
  if (auto err = quota_refusal(st, spec, placement)) {
    rp.deliver(std::move(err));
    return;
  }
  std::string why;
  auto nodes = place_job(st, placement, why);
  if (nodes.empty()) {
    rp.deliver(cluster_error(errc::unavailable, "cannot place the job: " + why));
    return;
  }
  // Its memory counts on each node it was given (racks name no count beforehand).
  if (auto err = quota_refusal(st, spec, placement, nodes.size())) {
    rp.deliver(std::move(err));
    return;
  }
  auto layout = layout_of(nodes);
  if (!choose_reduction(spec, placement, nodes, probes, layout, why)) {
    rp.deliver(cluster_error(errc::invalid_spec, "cannot place the job: " + why));
    return;
  }
  // Replicas: a flat BSP job on several nodes (a replica counts pushes in rank order as
  // its home does; under SSP or async the order of arrival would make them differ).
  bool replicable = nodes.size() > 1 && layout.reduction == "flat"
                    && spec.consistency.model == consistency_spec::bsp;
  auto asked = placement.replicas < 0 ? defaults::replicas
                                      : static_cast<uint32_t>(placement.replicas);
  if (placement.replicas > 0 && !replicable) {
    rp.deliver(cluster_error(
      errc::invalid_spec,
      "cannot place the job: replicas = 1 needs a flat BSP job on two nodes or more"));
    return;
  }
  layout.replicas = replicable ? asked : 0;
  job_entry j;
  j.report.id = st.next_job_id++;
  j.report.name = spec.name;
  j.report.state = "created";
  j.report.node = nodes.front()->info.name;
  j.report.endpoints = nodes.front()->info.endpoints;
  j.report.layout = layout;
  j.report.spec = spec;
  j.report.created_unix_ms = unix_ms();
  j.report.max_memory = placement.memory;
  j.token = runtime::make_token();
  for (auto* m : nodes)
    j.node_ids.push_back(m->info.id);
  auto id = j.report.id;
  auto ids = j.node_ids;
  j.restore = placement.restore;
  j.checkpoint_every = placement.checkpoint_every;
  j.checkpoint_dir = placement.checkpoint_dir;
  auto grant = job_grant{id,
                         spec,
                         j.token,
                         j.report.layout,
                         placement.restore,
                         placement.checkpoint_every,
                         placement.checkpoint_dir};
  grant.max_memory = placement.memory;
  if (nodes.size() > 1)
    spdlog::info("job placed: job='{}' id={} nodes=[{}] racks=[{}] reduction={} "
                 "ring_version={}; {}",
                 spec.name, id, fmt::join(grant.layout.nodes, ","),
                 fmt::join(grant.layout.racks, ","), layout.reduction,
                 grant.layout.ring_version, layout.plan);
  // The name is taken from now on; a refused grant gives it back.
  st.by_name[spec.name] = id;
  st.jobs.emplace(id, std::move(j));
  ask_nodes<ok_atom>(
    self, ids, "did not take the job",
    [self, rp, id, ids, by](auto&, std::vector<std::string>& failures) mutable {
      // Not created: the entry goes, its id stays taken, and nodes that took the grant
      // after all (late) end it too.
      auto refuse = [self, rp, id, ids](const std::vector<std::string>& why) mutable {
        auto it = self->state.jobs.find(id);
        if (it != self->state.jobs.end()) {
          self->state.by_name.erase(it->second.report.name);
          self->state.jobs.erase(it);
        }
        save_next_job_id(self);
        halt_on(self, ids, id, "the job was not created (a node did not take it)");
        auto msg = fmt::format("{}", fmt::join(why, "; "));
        spdlog::warn("job not created: id={}: {}", id, msg);
        rp.deliver(cluster_error(errc::unavailable, msg));
      };
      if (failures.empty() && self->state.jobs.count(id) == 0)
        failures.push_back("the job's node left while the job was being created");
      if (!failures.empty()) {
        refuse(failures);
        return;
      }
      // Recorded before the shell hears of it: a coordinator that restarts has it.
      save_job(self, id, [self, rp, id, by, refuse](const std::string& why) mutable {
        if (!why.empty()) {
          refuse({"the job could not be recorded, so it was not created: " + why});
          return;
        }
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end()) {
          rp.deliver(cluster_error(errc::unavailable,
                                   "the job was deleted while it was being recorded"));
          return;
        }
        auto& r = it->second.report;
        spdlog::info(
          "job created: job='{}' id={} by {} nodes=[{}] workers={} consistency={} "
          "compression={}{} optimizer={} chunk_bytes={}",
          r.name, id, by, fmt::join(r.layout.nodes, ","), r.spec.num_workers,
          to_string(r.spec.consistency), to_string(r.spec.compression),
          r.spec.compression.updates ? "+updates" : "", to_string(r.spec.optimizer.kind),
          r.spec.chunk_bytes);
        rp.deliver(job_created{r, it->second.token});
      });
    },
    grant_atom::value, grant);
}

// Places the job and grants it (after probing its core links where its reduction
// needs them). With no node to place it on while nodes that had jobs are awaited after
// a restart (they register again within node_timeout), it waits for them: a script
// that creates a job just after the coordinator came back is not refused for a node
// about to return.
void place_or_wait(cluster_ptr self, created_promise rp, const job_spec& spec,
                   const job_placement& placement, const std::string& by) {
  auto& st = self->state;
  std::string why;
  auto nodes = place_job(st, placement, why);
  if (nodes.empty() && !st.awaited.empty()) {
    std::vector<std::string> names;
    for (auto& [name, id] : st.awaited)
      names.push_back(name);
    spdlog::info("job '{}' asked by {} waits to be placed ({}): node(s) [{}] are to "
                 "register again within {} ms of the coordinator's start",
                 spec.name, by, why, fmt::join(names, ", "),
                 st.settings.node_timeout.count());
    st.placing_later.push_back([self, rp, spec, placement, by]() mutable {
      if (rp.pending())
        place_or_wait(self, rp, spec, placement, by);
    });
    return;
  }
  if (nodes.empty()) {
    rp.deliver(cluster_error(errc::unavailable, "cannot place the job: " + why));
    return;
  }
  if (!wants_core_probes(spec, placement, nodes)) {
    place_and_grant(self, rp, spec, placement, {}, by);
    return;
  }
  probe_core_links(self, nodes, spec.name,
                   [self, rp, spec, placement, by](core_probes probes) mutable {
                     place_and_grant(self, rp, spec, placement, probes, by);
                   });
}

} // namespace

caf::result<job_created> create_job(cluster_ptr self, job_spec& spec,
                                    const job_placement& asked, const std::string& by) {
  auto& st = self->state;
  // Checkpoint paths resolved under --checkpoint-root (canonical: the nodes get these).
  auto placement = asked;
  try {
    auto& root = st.settings.checkpoint_root;
    if (!placement.restore.empty())
      placement.restore = root.resolve(placement.restore, "restore");
    if (!placement.checkpoint_dir.empty())
      placement.checkpoint_dir = root.resolve(placement.checkpoint_dir, "checkpoint_dir");
  } catch (const runtime::checkpoint::checkpoint_error& e) {
    spdlog::warn("job not created: job='{}' asked by {}: {}", spec.name, by, e.what());
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}': {}", spec.name, e.what()));
  }
  // Tensors given here are the job's (workers read them); else the first worker declares.
  auto probe = spec;
  if (probe.tensors.empty())
    probe.tensors.push_back({"probe", 1, false});
  if (auto why = validate(probe, st.settings.max_chunk_bytes, st.settings.max_workers);
      !why.empty())
    return cluster_error(errc::invalid_spec, "invalid job spec: " + why);
  if (auto* old = job_named(self, spec.name))
    return duplicate(*old);
  if (placement.checkpoint_every > 0 && placement.checkpoint_dir.empty())
    return cluster_error(errc::invalid_spec, "checkpoint_every needs checkpoint_dir");
  if (!placement.restore.empty())
    if (auto why = check_restore(spec, placement.restore); !why.empty())
      return cluster_error(errc::invalid_spec, why);
  if (!placement.checkpoint_dir.empty()) {
    // A new job's periodic checkpoints go into a new or empty directory: never over
    // another run's (a job restarted after a node's death keeps its own, cluster_recover).
    try {
      runtime::checkpoint::prepare_dir(placement.checkpoint_dir);
    } catch (const runtime::checkpoint::checkpoint_error& e) {
      spdlog::warn("job not created: job='{}' asked by {}: checkpoint_dir: {}", spec.name,
                   by, e.what());
      return cluster_error(errc::invalid_spec, fmt::format("job '{}': checkpoint_dir: {}",
                                                           spec.name, e.what()));
    }
  }
  auto rp = self->make_response_promise<job_created>();
  place_or_wait(self, rp, spec, placement, by);
  return rp;
}

void retry_placements(cluster_ptr self) {
  auto held = std::move(self->state.placing_later);
  self->state.placing_later.clear();
  for (auto& place : held)
    place(); // may hold it again (placing_later)
}

} // namespace rw::actors::detail
