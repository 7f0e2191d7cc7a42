// shard_core's calls: the backlog (priority order), the requests that need no handler
// file of their own, and the way into the handlers (handlers.hpp) for the rest.

#include "actors/shard/core.hpp"

#include <algorithm>

#include "actors/shard/handlers.hpp"
#include "actors/shard/hyper.hpp"
#include "actors/shard/slow_steps.hpp"
#include "runtime/thread_cpu.hpp"

namespace rw::actors {

namespace si = shard_impl;

shard_core::shard_core(shard_settings settings, std::shared_ptr<detail::shard_book> book,
                       shard_outbox& out)
  : state{std::move(settings), std::move(book), {}, {}}, out(out) {
  state.held = detail::held_answers(state.settings.test_answer_delays);
}

void shard_core::start() {
  if (state.book->incarnation++ > 0)
    si::adopt(*this);
}

void shard_core::push(chunk_push& p) {
  // Order only matters when requests queue: with nothing waiting, serve at once.
  if (!state.settings.priority || (state.book->backlog.empty() && out.idle())) {
    si::changing(*this, p.job_id, [&] { si::on_push(*this, p); });
    return;
  }
  // The work token goes behind whatever is queued already: by the time it is taken,
  // every push that arrived meanwhile is in the backlog to choose from.
  auto clock = p.clock;
  state.book->backlog.emplace(clock, std::move(p));
  out.work_later();
}

void shard_core::push(std::vector<chunk_push>& batch) {
  auto& backlog = state.book->backlog;
  if (state.settings.priority && !(backlog.empty() && out.idle())) {
    for (auto& p : batch) { // behind what waits, as single pushes would be
      auto clock = p.clock;
      backlog.emplace(clock, std::move(p));
      out.work_later();
    }
    return;
  }
  // Nothing else waits: the batch is the queue; lowest clock first with priority on.
  if (state.settings.priority)
    std::stable_sort(
      batch.begin(), batch.end(),
      [](const chunk_push& a, const chunk_push& b) { return a.clock < b.clock; });
  detail::shard_answers::holding together{state.answers};
  for (auto& p : batch)
    si::changing(*this, p.job_id, [&] { si::on_push(*this, p); });
}

void shard_core::work() {
  // The backlog's lowest clocks, a few at a time (the work tokens of those served here
  // find less, or nothing, to do), their answers sent together.
  auto& backlog = state.book->backlog;
  detail::shard_answers::holding together{state.answers};
  for (int served = 0; served < si::max_served_per_work && !backlog.empty(); ++served) {
    auto next = std::move(backlog.begin()->second);
    backlog.erase(backlog.begin());
    si::changing(*this, next.job_id, [&] { si::on_push(*this, next); });
  }
}

void shard_core::flush() {
  state.answers.flush_replica_acks();
}

void shard_core::init(chunk_push& p) {
  si::changing(*this, p.job_id, [&] { si::on_init(*this, p); });
}

void shard_core::pull(chunk_pull& p) {
  si::on_pull(*this, p);
}

void shard_core::state_of(state_request& r) {
  if (r.load)
    si::changing(*this, r.job_id, [&] { si::on_state(*this, r); });
  else
    si::on_state(*this, r);
}

void shard_core::relay(const relay_update& u) {
  si::changing(*this, u.job_id, [&] { si::on_relay(*this, u); });
}

void shard_core::mirrored(uint32_t job_id, const std::vector<uint64_t>& acked) {
  detail::shard_answers::holding together{state.answers};
  si::changing(*this, job_id, [&] {
    for (size_t i = 0; i + 2 < acked.size(); i += 3)
      si::on_mirrored(*this, job_id, static_cast<uint32_t>(acked[i]),
                      static_cast<uint32_t>(acked[i + 1]), acked[i + 2]);
  });
}

void shard_core::norm(uint32_t job_id, uint32_t tensor, uint64_t version, uint32_t chunk,
                      double w2, double d2) {
  si::on_norm(*this, job_id, tensor, version, chunk, w2, d2);
}

void shard_core::trust(uint32_t job_id, uint32_t tensor, uint64_t version, float trust) {
  si::changing(*this, job_id,
               [&] { si::on_trust(*this, job_id, tensor, version, trust); });
}

shard_refusal shard_core::create(job_setup& setup,
                                 std::shared_ptr<job_reports> coordinator) {
  return si::create_job(*this, setup, std::move(coordinator));
}

void shard_core::checkpoint(uint32_t job_id, uint64_t clock, snapshot_reply_ptr reply) {
  si::on_checkpoint(*this, job_id, clock, std::move(reply));
}

void shard_core::leave(uint32_t job_id, uint32_t rank, const std::string& why) {
  auto it = state.book->jobs.find(job_id);
  if (it == state.book->jobs.end() || rank >= it->second.departed.size())
    return;
  if (!it->second.departed[rank]) {
    it->second.departed[rank] = true;
    ++it->second.departed_count;
  }
  si::fail_steps_needing(state, job_id, it->second, rank, why);
}

void shard_core::rejoin(uint32_t job_id, uint32_t rank) {
  auto it = state.book->jobs.find(job_id);
  if (it == state.book->jobs.end() || rank >= it->second.departed.size()
      || !it->second.departed[rank])
    return;
  it->second.departed[rank] = false;
  --it->second.departed_count;
}

uint64_t shard_core::resume(uint32_t job_id, uint32_t rank) {
  uint64_t lowest = UINT64_MAX;
  auto it = state.book->jobs.find(job_id);
  if (it == state.book->jobs.end() || rank >= it->second.departed.size())
    return lowest;
  auto& job = it->second;
  si::for_each_own_chunk(
    state, job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
      if (job.routes->is_owned(t, c)) // a replica counts no worker's pushes
        lowest = std::min(lowest, cs.next_clock(rank));
      return true;
    });
  return lowest;
}

void shard_core::abort(uint32_t job_id, errc code, const std::string& why) {
  si::fail_job(state, job_id, code, why);
}

void shard_core::drop(uint32_t job_id, errc code, const std::string& why) {
  si::drop_job(*this, job_id, code, why);
}

void shard_core::send_held() {
  state.held.send_due(std::chrono::steady_clock::now());
}

void shard_core::tick() {
  si::scan_timeouts(*this);
  si::release_finished(state);
}

shard_stats shard_core::stats() const {
  auto s = state.book->stats;
  s.busy_ns = runtime::this_thread_cpu_ns(); // the shard's: its actor is detached
  s.cpu = runtime::current_cpu();
  s.affinity = runtime::current_affinity();
  s.memory_numa = state.book->memory_numa;
  // The backlog only: the actor's mailbox is not counted (counting it from inside a
  // handler, fifo_inbox::size, moves its messages while CAF iterates them, which UBSan
  // catches as a bad downcast).
  s.queued = state.book->backlog.size();
  return s;
}

job_counters shard_core::counters(uint32_t job_id) const {
  auto it = state.book->jobs.find(job_id);
  // A job without chunks here counts nothing here.
  if (it == state.book->jobs.end() || it->second.chunks.empty())
    return {};
  auto& job = it->second;
  auto out = job.counters;
  for (uint32_t r = 0; r < out.size(); ++r) {
    auto& f = job.lateness.of(r);
    out[r].late_last_ns = f.last_ns;
    out[r].late_recent_ns = f.recent_ns;
    out[r].late_max_ns = f.max_ns;
    out[r].late_steps = f.steps;
  }
  auto slow = detail::find_slow_steps(job, state.settings.index,
                                      std::chrono::steady_clock::now(),
                                      state.settings.slow_step);
  for (auto& [rank, w] : slow.ranks)
    if (rank < out.size()) {
      out[rank].waited_ns = static_cast<uint64_t>(w.waited.count());
      out[rank].missing_chunks = w.chunks;
    }
  return out;
}

shard_refusal shard_core::hold(uint32_t job_id, settle_targets& reach) {
  return si::on_hold(*this, job_id, reach);
}

void shard_core::fence(uint32_t job_id, const settle_targets& targets,
                       snapshot_reply_ptr reply) {
  si::on_fence(*this, job_id, targets, std::move(reply));
}

shard_refusal shard_core::reshape(job_setup& setup) {
  return si::on_reshape(*this, setup);
}

shard_refusal shard_core::takeover(route_change& rc) {
  shard_refusal refused;
  si::changing(*this, rc.job_id, [&] { refused = si::on_takeover(*this, rc); });
  return refused;
}

void shard_core::thaw(uint32_t job_id) {
  auto it = state.book->jobs.find(job_id);
  if (it == state.book->jobs.end())
    return;
  auto& job = it->second;
  job.settling = false;
  job.frozen = false;
  job.settle_to.clear();
  if (job.settle_reply) {
    job.settle_reply->fail(errc::stopped, "the move was given up");
    job.settle_reply.reset();
  }
  si::serve_held(*this, job_id, job);
}

uint64_t shard_core::prepare_hyper(uint32_t job_id, uint64_t id,
                                   const hyper_change& change) {
  auto it = state.book->jobs.find(job_id);
  return it == state.book->jobs.end() ? 0 : detail::prepare_hyper(it->second, id, change);
}

void shard_core::end_hyper(uint32_t job_id, uint64_t id, bool apply) {
  auto it = state.book->jobs.find(job_id);
  if (it == state.book->jobs.end() || !detail::end_hyper(it->second, id, apply))
    return;
  auto& job = it->second;
  detail::for_each_chunk(job, state.settings.index,
                         [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
                           si::run_steps(*this, job_id, job, t, c, cs); // those held
                           return true;
                         });
}

balance_plan shard_core::plan(double share) {
  return detail::plan_shed(*state.book, state.settings.index, share);
}

shard_refusal shard_core::expect(const shard_move& m) {
  return si::on_expect(*this, m);
}

shard_refusal shard_core::give(const shard_move& m, handoff_ptr& handoff) {
  return si::on_migrate(*this, m, handoff);
}

shard_refusal shard_core::adopt(const handoff_ptr& handoff) {
  return si::on_adopt(*this, handoff);
}

} // namespace rw::actors
