#include "actors/rack/rack_coordinator.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/chunk_state.hpp"
#include "actors/rack/state.hpp"
#include "runtime/credentials.hpp"
#include "runtime/kernels.hpp"
#include "runtime/ring.hpp"

namespace rw::actors {

namespace detail {

job_binding refuse(errc code, std::string message) {
  job_binding b;
  b.code = code;
  b.message = std::move(message);
  return b;
}

} // namespace detail

namespace {

using namespace detail;

void on_replace(rack_ptr self, uint32_t index, chunk_shard_actor& shard) {
  auto& st = self->state;
  if (index >= st.shards.size())
    return;
  st.shards[index] = std::move(shard);
  for (auto& [name, job] : st.jobs)
    if (job.mirror)
      job.mirror->set_shard(index, st.shards[index]);
  auto retries = std::move(st.on_shard_replaced[index]);
  st.on_shard_replaced.erase(index);
  for (auto& retry : retries)
    retry();
  auto aborts = std::move(st.checkpoint_aborts);
  st.checkpoint_aborts.clear();
  for (auto& [hook, abort] : aborts)
    abort(fmt::format("shard {} of node {} crashed while the checkpoint waited for its "
                      "chunks; the job goes on: take the checkpoint again",
                      index, st.settings.node_name));
  // The successor holds the chunks' state and fails (abort_atom) only the jobs whose
  // state may be lost; the pollers have the workers re-send what died in its mailbox.
  spdlog::warn("shard {} was restarted with its state; {} live job(s) on the node go on "
               "unless the shard reports them lost",
               index, st.jobs.size());
}

rack_coordinator_actor::behavior_type rack_behavior(
  rack_ptr self, coordinator_settings settings, std::vector<chunk_shard_actor> shards) {
  self->state.settings = std::move(settings);
  self->state.shards = std::move(shards);
  if (self->state.settings.balance_interval.count() > 0)
    self->delayed_send(self, self->state.settings.balance_interval, balance_atom::value);
  return {
    [=](hello_atom, hello_request& req) { return on_hello(self, req); },
    [=](proof_atom, proof_request& p) { return on_proof(self, p); },
    [=](attach_atom, const attach_request& req) { return on_attach(self, req); },
    [=](grant_atom, job_grant& g) { return on_grant(self, g); },
    [=](status_atom, uint32_t job_id) { return on_status(self, job_id); },
    [=](ckpt_atom, uint32_t job_id, uint64_t clock, chunk_snapshot& snap) {
      on_periodic(self, job_id, clock, snap);
    },
    [=](step_atom, uint32_t job_id, uint32_t shard, uint64_t clock) {
      on_step(self, job_id, shard, clock);
    },
    [=](metrics_atom) {
      return node_gauges{job_gauges(self->state), self->state.shards};
    },
    [=](checkpoint_atom, uint32_t job_id, uint64_t clock,
        const std::string& dir) -> caf::result<checkpoint_part> {
      if (auto rp = after_balancing<checkpoint_part>(self, checkpoint_atom::value, job_id,
                                                     clock, dir))
        return *rp;
      return on_checkpoint(self, job_id, clock, dir);
    },
    [=](halt_atom, uint32_t job_id, const std::string& reason) {
      return on_halt(self, job_id, reason);
    },
    [=](abort_atom, uint32_t job_id, const std::string& reason) {
      return on_halt(self, job_id, reason, true);
    },
    [=](halt_atom, const std::vector<uint32_t>& keep, const std::string& reason) {
      on_halt_all(self, keep, reason);
    },
    [=](register_atom, cluster_gateway& link) { self->state.link = std::move(link); },
    [=](locate_atom, std::string& address, std::string& door) {
      self->state.cluster_address = std::move(address);
      self->state.tenant_door = std::move(door);
    },
    [=](locate_atom) {
      return caf::make_result(self->state.cluster_address, self->state.tenant_door);
    },
    [=](replace_atom, uint32_t index, chunk_shard_actor& shard) {
      on_replace(self, index, shard);
    },
    [=](inject_atom, uint32_t job_id, const std::string& kill, uint32_t index) {
      return on_inject(self, job_id, kill, index);
    },
    [=](fence_atom, uint32_t job_id, const job_layout& next) -> caf::result<chunk_moves> {
      if (auto rp = after_balancing<chunk_moves>(self, fence_atom::value, job_id, next))
        return *rp;
      return on_fence(self, job_id, next);
    },
    [=](reshape_atom, uint32_t job_id, const job_layout& next,
        const chunk_moves& moves) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, reshape_atom::value, job_id, next,
                                             moves))
        return *rp;
      return on_reshape(self, job_id, next, moves);
    },
    [=](reroute_atom, uint32_t job_id, const job_layout& next) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, reroute_atom::value, job_id, next))
        return *rp;
      return on_reroute(self, job_id, next);
    },
    [=](thaw_atom, uint32_t job_id) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, thaw_atom::value, job_id))
        return *rp;
      return on_thaw(self, job_id);
    },
    [=](takeover_atom, uint32_t job_id, const job_layout& next) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, takeover_atom::value, job_id, next))
        return *rp;
      return on_takeover(self, job_id, next);
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id,
        const hyper_change& change) -> caf::result<uint64_t> {
      if (auto rp = after_balancing<uint64_t>(self, hyper_atom::value, job_id, id,
                                              change))
        return *rp;
      return on_hyper_prepare(self, job_id, id, change);
    },
    [=](hyper_atom, uint32_t job_id, const hyper_change& change)
      -> caf::result<uint64_t> { return on_hyper_request(self, job_id, change); },
    [=](hyper_atom, uint32_t job_id, uint64_t id, bool apply) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, hyper_atom::value, job_id, id, apply))
        return *rp;
      return on_hyper_end(self, job_id, id, apply);
    },
    [=](balance_atom) { on_balance(self); },
    [=](pollers_atom, std::vector<caf::actor>& pollers) {
      self->state.pollers = std::move(pollers);
    },
    [=](leave_atom, uint32_t job_id, uint32_t rank, bool graceful,
        const std::string& reason) { on_leave(self, job_id, rank, graceful, reason); },
    [=](rejoin_atom, uint32_t job_id, uint32_t rank, uint32_t departure) {
      on_rejoin_window(self, job_id, rank, departure);
    },
    [=](abort_atom, uint32_t job_id, errc code, const std::string& why) {
      end_job(self, job_id, "failed", code, why);
    },
  };
}

} // namespace

rack_coordinator_actor spawn_rack_coordinator(caf::actor_system& sys,
                                              coordinator_settings settings,
                                              std::vector<chunk_shard_actor> shards) {
  return sys.spawn(rack_behavior, std::move(settings), std::move(shards));
}

} // namespace rw::actors