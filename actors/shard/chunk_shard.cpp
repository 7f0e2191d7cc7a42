#include "actors/shard/chunk_shard.hpp"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/chunk_state.hpp"
#include "logic/shard_answers.hpp"
#include "actors/shard/balance.hpp"
#include "actors/shard/hyper.hpp"
#include "actors/shard/checkpoint.hpp"
#include "actors/shard/job.hpp"
#include "actors/shard/moves.hpp"
#include "actors/links/mirror_link.hpp"
#include "actors/links/rack_uplink.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/thread_cpu.hpp"
#include "runtime/trace.hpp"

#include "actors/shard/handlers.hpp"

namespace rw::actors {

namespace shard_impl {

chunk_shard_actor::behavior_type shard_behavior(shard_ptr self, shard_settings settings,
                                                std::shared_ptr<shard_book> book) {
  self->state.settings = settings;
  self->state.book = std::move(book);
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
  if (self->state.book->incarnation++ > 0)
    adopt(self);
  return {
    [=](push_atom, chunk_push& p) {
      // Order only matters when requests queue: with nothing waiting, serve at once.
      auto& st = self->state;
      if (!st.settings.priority
          || (st.book->backlog.empty() && self->mailbox().empty())) {
        changing(self, p.job_id, [&] { on_push(self, p); });
        return;
      }
      // The work token goes behind whatever is queued already: by the time it is taken,
      // every push that arrived meanwhile is in the backlog to choose from.
      auto clock = p.clock;
      self->state.book->backlog.emplace(clock, std::move(p));
      self->send(self, work_atom::value);
    },
    [=](push_atom, std::vector<chunk_push>& batch) {
      auto& st = self->state;
      auto& backlog = st.book->backlog;
      if (st.settings.priority && !(backlog.empty() && self->mailbox().empty())) {
        for (auto& p : batch) { // behind what waits, as single pushes would be
          auto clock = p.clock;
          backlog.emplace(clock, std::move(p));
          self->send(self, work_atom::value);
        }
        return;
      }
      // Nothing else waits: the batch is the queue; lowest clock first with priority on.
      if (st.settings.priority)
        std::stable_sort(
          batch.begin(), batch.end(),
          [](const chunk_push& a, const chunk_push& b) { return a.clock < b.clock; });
      detail::shard_answers::holding together{st.answers};
      for (auto& p : batch)
        changing(self, p.job_id, [&] { on_push(self, p); });
    },
    [=](work_atom) {
      // The backlog's lowest clocks, a few at a time (the work tokens of those served
      // here find less, or nothing, to do), their answers sent together.
      auto& backlog = self->state.book->backlog;
      detail::shard_answers::holding together{self->state.answers};
      for (int served = 0; served < max_served_per_work && !backlog.empty(); ++served) {
        auto next = std::move(backlog.begin()->second);
        backlog.erase(backlog.begin());
        changing(self, next.job_id, [&] { on_push(self, next); });
      }
    },
    [=](flush_atom) { self->state.answers.flush_replica_acks(); },
    [=](init_atom, chunk_push& p) {
      changing(self, p.job_id, [&] { on_init(self, p); });
    },
    [=](relay_atom, const relay_update& u) {
      changing(self, u.job_id, [&] { on_relay(self, u); });
    },
    [=](mirror_atom, uint32_t job_id, const std::vector<uint64_t>& acked) {
      detail::shard_answers::holding together{self->state.answers};
      changing(self, job_id, [&] {
        for (size_t i = 0; i + 2 < acked.size(); i += 3)
          on_mirrored(self, job_id, static_cast<uint32_t>(acked[i]),
                      static_cast<uint32_t>(acked[i + 1]), acked[i + 2]);
      });
    },
    [=](crash_atom, const std::string& why) {
      // Stuck a moment first, so requests queue in the mailbox and die with it (the
      // workers' re-send must bring them back).
      spdlog::warn("shard {}: crashing on purpose in 50 ms ({})",
                   self->state.settings.index, why);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      throw std::runtime_error("injected fault: " + why);
    },
    [=](pull_atom, chunk_pull& p) { on_pull(self, p); },
    [=](create_atom, job_setup& setup, abort_sink& coordinator) {
      return create_job(self, setup, std::move(coordinator));
    },
    [=](ckpt_atom, uint32_t job_id, uint64_t clock) {
      return on_checkpoint(self, job_id, clock);
    },
    [=](hold_atom, uint32_t job_id) { return on_hold(self, job_id); },
    [=](fence_atom, uint32_t job_id, const settle_targets& targets) {
      return on_fence(self, job_id, targets);
    },
    [=](reshape_atom, job_setup& setup) { return on_reshape(self, setup); },
    [=](takeover_atom, route_change& rc) {
      caf::result<ok_atom> out = ok_atom::value;
      changing(self, rc.job_id, [&] { out = on_takeover(self, rc); });
      return out;
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id, hyper_change& change) -> uint64_t {
      auto it = self->state.book->jobs.find(job_id);
      return it == self->state.book->jobs.end()
               ? 0
               : detail::prepare_hyper(it->second, id, change);
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id, bool apply) {
      auto it = self->state.book->jobs.find(job_id);
      if (it == self->state.book->jobs.end() || !detail::end_hyper(it->second, id, apply))
        return;
      auto& job = it->second;
      detail::for_each_chunk(job, self->state.settings.index,
                             [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
                               run_steps(self, job_id, job, t, c, cs); // those held
                               return true;
                             });
    },
    [=](thaw_atom, uint32_t job_id) {
      auto it = self->state.book->jobs.find(job_id);
      if (it == self->state.book->jobs.end())
        return;
      auto& job = it->second;
      job.settling = false;
      job.frozen = false;
      job.settle_to.clear();
      if (job.settle_rp) {
        job.settle_rp->deliver(cluster_error(errc::stopped, "the move was given up"));
        job.settle_rp.reset();
      }
      serve_held(self, job_id, job);
    },
    [=](leave_atom, uint32_t job_id, uint32_t rank, const std::string& why) {
      auto it = self->state.book->jobs.find(job_id);
      if (it == self->state.book->jobs.end() || rank >= it->second.departed.size())
        return;
      if (!it->second.departed[rank]) {
        it->second.departed[rank] = true;
        ++it->second.departed_count;
      }
      fail_steps_needing(self->state, job_id, it->second, rank, why);
    },
    [=](rejoin_atom, uint32_t job_id, uint32_t rank) {
      auto it = self->state.book->jobs.find(job_id);
      if (it == self->state.book->jobs.end() || rank >= it->second.departed.size()
          || !it->second.departed[rank])
        return;
      it->second.departed[rank] = false;
      --it->second.departed_count;
    },
    [=](resume_atom, uint32_t job_id, uint32_t rank) {
      auto& st = self->state;
      uint64_t lowest = UINT64_MAX;
      auto it = st.book->jobs.find(job_id);
      if (it == st.book->jobs.end() || rank >= it->second.departed.size())
        return lowest;
      auto& job = it->second;
      for_each_own_chunk(st, job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
        if (job.routes->is_owned(t, c)) // a replica counts no worker's pushes
          lowest = std::min(lowest, cs.next_clock(rank));
        return true;
      });
      return lowest;
    },
    [=](abort_atom, uint32_t job_id, errc code, const std::string& why) {
      fail_job(self->state, job_id, code, why);
    },
    [=](drop_atom, uint32_t job_id) {
      drop_job(self, job_id, errc::unknown_job,
               "the job finished: every worker said bye");
    },
    [=](drop_atom, uint32_t job_id, errc code, const std::string& why) {
      drop_job(self, job_id, code, why);
    },
    [=](norm_atom, uint32_t job_id, uint32_t tensor, uint64_t version, uint32_t chunk,
        double w2, double d2) { on_norm(self, job_id, tensor, version, chunk, w2, d2); },
    [=](trust_atom, uint32_t job_id, uint32_t tensor, uint64_t version, float trust) {
      changing(self, job_id, [&] { on_trust(self, job_id, tensor, version, trust); });
    },
    [=](tick_atom) {
      scan_timeouts(self);
      release_finished(self->state);
      self->delayed_send(self, self->state.settings.scan_interval, tick_atom::value);
    },
    [=](stats_atom, uint32_t job_id) {
      auto it = self->state.book->jobs.find(job_id);
      // A job without chunks here counts nothing here.
      if (it == self->state.book->jobs.end() || it->second.chunks.empty())
        return job_counters{};
      return it->second.counters;
    },
    [=](plan_atom, double share) {
      return detail::plan_shed(*self->state.book, self->state.settings.index, share);
    },
    [=](expect_atom, const shard_move& m) { return on_expect(self, m); },
    [=](migrate_atom, const shard_move& m, const caf::actor& to) {
      return on_migrate(self, m, to);
    },
    [=](adopt_atom, const handoff_ptr& h) { return on_adopt(self, h); },
    [=](stats_atom) {
      auto s = self->state.book->stats;
      s.busy_ns = runtime::this_thread_cpu_ns(); // the shard's: it is detached
      s.cpu = runtime::current_cpu();
      s.affinity = runtime::current_affinity();
      s.memory_numa = self->state.book->memory_numa;
      // The backlog only: counting the mailbox from inside a handler (fifo_inbox::size)
      // moves its messages while CAF iterates them, which UBSan catches as a bad downcast.
      s.queued = self->state.book->backlog.size();
      return s;
    },
  };
}

} // namespace shard_impl

std::shared_ptr<detail::shard_book> make_shard_book() {
  return std::make_shared<detail::shard_book>();
}

chunk_shard_actor spawn_chunk_shard(caf::actor_system& sys, shard_settings settings,
                                    std::shared_ptr<detail::shard_book> book) {
  return sys.spawn<caf::detached>(shard_impl::shard_behavior, settings,
                                  book ? std::move(book) : make_shard_book());
}

} // namespace rw::actors
