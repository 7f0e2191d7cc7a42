// The chunk shard actor: a thin driver of shard_core (core.hpp). Each message of the
// protocol (chunk_shard.hpp) becomes a call, each answer a reply or a response
// promise, and each call on the core's interfaces (outbox.hpp) a message: tokens to
// itself, norms and trust ratios to the node's other shards, reports to a job's
// coordinator.

#include "actors/shard/chunk_shard.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/shard/core.hpp"
#include "runtime/thread_cpu.hpp"

namespace rw::actors {

namespace {

// The shard's own mailbox, for its core.
class mailbox_outbox final : public shard_outbox {
public:
  explicit mailbox_outbox(caf::scheduled_actor* self) : self_(self) {}
  bool idle() override { return self_->mailbox().empty(); }
  void work_later() override { caf::anon_send(handle(), work_atom::value); }
  void flush_later() override { caf::anon_send(handle(), flush_atom::value); }

private:
  caf::actor handle() { return caf::actor_cast<caf::actor>(self_); }
  caf::scheduled_actor* self_;
};

// Every shard of the node, by index.
class actor_peers final : public shard_peers {
public:
  explicit actor_peers(std::vector<chunk_shard_actor> shards)
    : shards_(std::move(shards)) {}
  size_t size() const override { return shards_.size(); }
  void norm(uint32_t to, uint32_t job_id, uint32_t tensor, uint64_t version,
            uint32_t chunk, double w2, double d2) const override {
    caf::anon_send(shards_.at(to), norm_atom::value, job_id, tensor, version, chunk, w2,
                   d2);
  }
  void trust(uint32_t to, uint32_t job_id, uint32_t tensor, uint64_t version,
             float trust) const override {
    caf::anon_send(shards_.at(to), trust_atom::value, job_id, tensor, version, trust);
  }

private:
  std::vector<chunk_shard_actor> shards_;
};

// A job's node coordinator.
class sink_reports final : public job_reports {
public:
  explicit sink_reports(abort_sink sink) : sink_(std::move(sink)) {}
  void failed(uint32_t job_id, errc code, const std::string& why) override {
    caf::anon_send(sink_, abort_atom::value, job_id, code, why);
  }
  void checkpointed(uint32_t job_id, uint64_t clock, chunk_snapshot snap) override {
    caf::anon_send(sink_, ckpt_atom::value, job_id, clock, std::move(snap));
  }
  void stepped(uint32_t job_id, uint32_t shard, uint64_t clock) override {
    caf::anon_send(sink_, step_atom::value, job_id, shard, clock);
  }

private:
  abort_sink sink_;
};

// A response promise.
class promised_snapshot final : public snapshot_reply {
public:
  explicit promised_snapshot(caf::typed_response_promise<chunk_snapshot> rp)
    : rp_(std::move(rp)) {}
  void deliver(chunk_snapshot snap) override { rp_.deliver(std::move(snap)); }
  void fail(errc code, const std::string& why) override {
    rp_.deliver(cluster_error(code, why));
  }

private:
  caf::typed_response_promise<chunk_snapshot> rp_;
};

struct shard_state {
  std::unique_ptr<mailbox_outbox> out;
  std::unique_ptr<shard_core> core;
  static inline const char* name = "rw.chunk_shard";
};

using shard_ptr = chunk_shard_actor::stateful_pointer<shard_state>;

caf::result<ok_atom> answer(const shard_refusal& r) {
  if (r)
    return cluster_error(r.code, r.why);
  return ok_atom::value;
}

chunk_shard_actor::behavior_type shard_behavior(
  shard_ptr self, shard_settings settings, std::shared_ptr<detail::shard_book> book) {
  runtime::name_this_thread("rw-shard-" + std::to_string(settings.index));
  if (settings.topo) {
    try {
      settings.topo->pin_current_thread(settings.core);
    } catch (const std::exception& e) {
      spdlog::error("shard {}: {}", settings.index, e.what());
      self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
      return chunk_shard_actor::behavior_type::make_empty_behavior();
    }
  }
  if (settings.cpu_clock) { // the balancer reads this thread's CPU time from there
    auto token = settings.cpu_clock->publish_this_thread();
    self->attach_functor([slot = settings.cpu_clock, token] { slot->withdraw(token); });
  }
  self->delayed_send(self, settings.scan_interval, tick_atom::value);
  auto& st = self->state;
  st.out = std::make_unique<mailbox_outbox>(self);
  st.core = std::make_unique<shard_core>(settings, std::move(book), *st.out);
  auto* core = st.core.get(); // lives as long as the behavior
  core->start();
  // The --test-delay-answers hook: held updates are looked at every quarter of the
  // shortest delay (never, unless the node was started with it).
  auto held_every = std::max(std::chrono::milliseconds(1),
                             core->state.held.shortest() / 4);
  if (core->state.held.active())
    self->delayed_send(self, held_every, held_atom::value);
  return {
    [=](push_atom, chunk_push& p) { core->push(p); },
    [=](push_atom, std::vector<chunk_push>& batch) { core->push(batch); },
    [=](work_atom) { core->work(); },
    [=](flush_atom) { core->flush(); },
    [=](init_atom, chunk_push& p) { core->init(p); },
    [=](relay_atom, const relay_update& u) { core->relay(u); },
    [=](mirror_atom, uint32_t job_id, const std::vector<uint64_t>& acked) {
      core->mirrored(job_id, acked);
    },
    [=](crash_atom, const std::string& why) {
      // Stuck a moment first, so requests queue in the mailbox and die with it (the
      // workers' re-send must bring them back).
      spdlog::warn("shard {}: crashing on purpose in 50 ms ({})", core->settings().index,
                   why);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      throw std::runtime_error("injected fault: " + why);
    },
    [=](pull_atom, chunk_pull& p) { core->pull(p); },
    [=](state_atom, state_request& r) { core->state_of(r); },
    [=](create_atom, job_setup& setup, abort_sink& coordinator) {
      std::shared_ptr<job_reports> reports;
      if (coordinator)
        reports = std::make_shared<sink_reports>(std::move(coordinator));
      return answer(core->create(setup, std::move(reports)));
    },
    [=](ckpt_atom, uint32_t job_id, uint64_t clock) -> caf::result<chunk_snapshot> {
      auto rp = self->make_response_promise<chunk_snapshot>();
      core->checkpoint(job_id, clock, std::make_shared<promised_snapshot>(rp));
      return rp; // answered through the copy the core holds
    },
    [=](hold_atom, uint32_t job_id) -> caf::result<settle_targets> {
      settle_targets reach;
      if (auto r = core->hold(job_id, reach))
        return cluster_error(r.code, r.why);
      return reach;
    },
    [=](fence_atom, uint32_t job_id,
        const settle_targets& targets) -> caf::result<chunk_snapshot> {
      auto rp = self->make_response_promise<chunk_snapshot>();
      core->fence(job_id, targets, std::make_shared<promised_snapshot>(rp));
      return rp;
    },
    [=](reshape_atom, job_setup& setup) { return answer(core->reshape(setup)); },
    [=](takeover_atom, route_change& rc) { return answer(core->takeover(rc)); },
    [=](hyper_atom, uint32_t job_id, uint64_t id, hyper_change& change) -> uint64_t {
      return core->prepare_hyper(job_id, id, change);
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id, bool apply) {
      core->end_hyper(job_id, id, apply);
    },
    [=](thaw_atom, uint32_t job_id) { core->thaw(job_id); },
    [=](leave_atom, uint32_t job_id, uint32_t rank, const std::string& why) {
      core->leave(job_id, rank, why);
    },
    [=](rejoin_atom, uint32_t job_id, uint32_t rank) { core->rejoin(job_id, rank); },
    [=](resume_atom, uint32_t job_id, uint32_t rank) {
      return core->resume(job_id, rank);
    },
    [=](abort_atom, uint32_t job_id, errc code, const std::string& why) {
      core->abort(job_id, code, why);
    },
    [=](drop_atom, uint32_t job_id) {
      core->drop(job_id, errc::unknown_job, "the job finished: every worker said bye");
    },
    [=](drop_atom, uint32_t job_id, errc code, const std::string& why) {
      core->drop(job_id, code, why);
    },
    [=](norm_atom, uint32_t job_id, uint32_t tensor, uint64_t version, uint32_t chunk,
        double w2, double d2) { core->norm(job_id, tensor, version, chunk, w2, d2); },
    [=](trust_atom, uint32_t job_id, uint32_t tensor, uint64_t version, float trust) {
      core->trust(job_id, tensor, version, trust);
    },
    [=](tick_atom) {
      core->tick();
      self->delayed_send(self, core->settings().scan_interval, tick_atom::value);
    },
    [=](held_atom) {
      core->send_held();
      self->delayed_send(self, held_every, held_atom::value);
    },
    [=](stats_atom, uint32_t job_id) { return core->counters(job_id); },
    [=](plan_atom, double share) { return core->plan(share); },
    [=](expect_atom, const shard_move& m) { return answer(core->expect(m)); },
    [=](migrate_atom, const shard_move& m, const caf::actor& to) -> caf::result<ok_atom> {
      handoff_ptr handoff;
      if (auto r = core->give(m, handoff))
        return cluster_error(r.code, r.why);
      // The shard the chunks go to answers for both.
      return self->delegate(caf::actor_cast<chunk_shard_actor>(to), adopt_atom::value,
                            handoff);
    },
    [=](adopt_atom, const handoff_ptr& h) { return answer(core->adopt(h)); },
    [=](stats_atom) { return core->stats(); },
  };
}

} // namespace

std::shared_ptr<detail::shard_book> make_shard_book() {
  return std::make_shared<detail::shard_book>();
}

std::shared_ptr<const shard_peers> make_shard_peers(
  const std::vector<chunk_shard_actor>& shards) {
  return std::make_shared<actor_peers>(shards);
}

chunk_shard_actor spawn_chunk_shard(caf::actor_system& sys, shard_settings settings,
                                    std::shared_ptr<detail::shard_book> book) {
  return sys.spawn<caf::detached>(shard_behavior, settings,
                                  book ? std::move(book) : make_shard_book());
}

} // namespace rw::actors
