// Node failover from the last periodic checkpoint. When a node of a flat job dies and
// the job has a complete periodic checkpoint (checkpoint_every), the job is not lost:
// it ends on its other nodes and starts again on them from that checkpoint, under a
// new id with the same name, spec and token, the ring without the dead node (its
// version one up). Its workers, told why, join again (a launcher restarts them, as
// after any failure) and go on from the checkpoint's clock, which their welcome says;
// with the same gradients the result is bitwise the fault-free run's. This is not the
// replica takeover of the design (chunks replicated along the ring): the steps since
// the checkpoint are computed again.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

bool restart_from_checkpoint(cluster_ptr self, uint32_t id, uint32_t dead,
                             const std::string& why) {
  auto& st = self->state;
  auto it = st.jobs.find(id);
  if (it == st.jobs.end())
    return false;
  auto& old = it->second;
  if (old.last_checkpoint.empty() || is_hierarchical(old.report.layout))
    return false;
  std::vector<const member*> survivors;
  std::vector<uint32_t> ids;
  for (auto n : old.node_ids) {
    auto m = st.nodes.find(n);
    if (n != dead && m != st.nodes.end()) {
      survivors.push_back(&m->second);
      ids.push_back(n);
    }
  }
  if (survivors.empty())
    return false;
  job_entry j;
  j.report = old.report;
  j.report.id = st.next_job_id++;
  j.report.state = "created";
  j.report.node = survivors.front()->info.name;
  j.report.endpoints = survivors.front()->info.endpoints;
  auto layout = layout_of(survivors);
  layout.reduction = "flat";
  layout.vnodes = old.report.layout.vnodes;
  layout.ring_version = old.report.layout.ring_version + 1;
  layout.plan = "restarted from a checkpoint on the nodes left";
  j.report.layout = layout;
  j.report.created_unix_ms = unix_ms();
  j.report.ended_unix_ms = 0;
  j.token = old.token;
  j.node_ids = ids;
  j.restore = old.last_checkpoint;
  j.checkpoint_every = old.checkpoint_every;
  j.checkpoint_dir = old.checkpoint_dir;
  j.last_checkpoint = old.last_checkpoint;
  j.last_checkpoint_clock = old.last_checkpoint_clock;
  auto name = old.report.name;
  auto reason = fmt::format("{}; job '{}' starts again from its checkpoint at clock {} "
                            "('{}') on [{}] as id {}: its workers join again and go on "
                            "from clock {}",
                            why, name, j.last_checkpoint_clock, j.last_checkpoint,
                            fmt::join(layout.nodes, ","), j.report.id,
                            j.last_checkpoint_clock);
  spdlog::warn("job restarts: job='{}' id={}: {}", name, id, reason);
  // The old incarnation ends on the nodes left (its workers hear why) before they take
  // the new one: both go to each node in this order.
  halt_on(self, ids, id, reason);
  unsave_job(self, id);
  st.jobs.erase(it);
  auto new_id = j.report.id;
  job_grant grant{new_id,    j.report.spec,      j.token,         layout,
                  j.restore, j.checkpoint_every, j.checkpoint_dir};
  grant.max_memory = j.report.max_memory;
  st.by_name[name] = new_id;
  st.jobs.emplace(new_id, std::move(j));
  save_job(self, new_id);
  for (auto n : ids) {
    auto m = st.nodes.find(n);
    auto node = m->second.info.name;
    self
      ->request(m->second.link, st.settings.node_request_timeout, grant_atom::value,
                grant)
      .then([](ok_atom) {},
            [self, new_id, node](caf::error& err) {
              fail_job(self, new_id,
                       fmt::format("node {} did not take the restarted job: {}", node,
                                   describe(self->system(), err)));
            });
  }
  return true;
}

} // namespace rw::actors::detail
