// In-node balancing, the node's side: every balance_interval the rack coordinator reads
// how much CPU time each shard's thread has used (its CPU clock, published in
// coordinator_settings::shard_cpu). Within each NUMA domain (shards serving the same
// endpoints), when the busiest shard has been busier than the least busy one by more
// than balance_ratio (and by 5 points of a core at least) in balance_windows samples in
// a row (a sample in which no shard was busy is skipped), it is asked which chunks it
// would give (the load they gave it since its last plan, at most half the gap), and
// those move at once to the least busy shard (actors/shard/balance.hpp: expect,
// pollers, migrate). One move at a time on the node; requests that change a job's
// routes or copy its chunks wait for it (after_balancing).

#include <algorithm>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"

namespace rw::actors::detail {

namespace {

using clock_type = std::chrono::steady_clock;

// A shard this busy (fraction of a core) or less is never too busy, and a gap this
// small is noise.
constexpr double min_busy = 0.05;
constexpr double min_gap = 0.05;

void end_move(rack_ptr self) {
  auto& b = self->state.balance;
  b.moving = false;
  b.streak = 0;
  auto deferred = std::move(b.deferred);
  b.deferred.clear();
  for (auto& retry : deferred)
    retry();
}

// Step 3 (the pollers have the new routes): the chunks leave `from` for `to`.
void migrate(rack_ptr self, shard_move m, size_t count, uint64_t bytes, double busy_from,
             double busy_to, clock_type::time_point started) {
  auto& st = self->state;
  self
    ->request(st.shards[m.from], st.settings.shard_setup_timeout, migrate_atom::value, m,
              caf::actor_cast<caf::actor>(st.shards[m.to]))
    .then(
      [=](ok_atom) {
        auto& st = self->state;
        auto per_shard = m.next->chunks_per_shard();
        ++st.balance.moves;
        auto* job = live_job(st, m.job_id);
        spdlog::info(
          "balance: job '{}' (id {}): {} chunk(s), {:.2f} MiB, moved from shard {} "
          "(busy {:.0f}%) to shard {} (busy {:.0f}%) in {} us; the job's chunks "
          "per shard now [{}]; {} move(s) on this node so far",
          job ? job->spec.name : std::string{"(ended)"}, m.job_id, count,
          double(bytes) / (1 << 20), m.from, busy_from * 100, m.to, busy_to * 100,
          std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now()
                                                                - started)
            .count(),
          fmt::join(per_shard, ","), st.balance.moves);
        st.balance.report = true;
        end_move(self);
      },
      [=](caf::error& err) {
        auto why = fmt::format("chunks moving from shard {} to shard {} were lost: {}",
                               m.from, m.to, to_string(err));
        spdlog::error("balance: job {}: {}", m.job_id, why);
        if (live_job(self->state, m.job_id) != nullptr)
          end_job(self, m.job_id, "failed", errc::internal, why);
        end_move(self);
      });
}

// Moves `plan`'s chunks from shard `from` to shard `to`.
void move(rack_ptr self, uint32_t from, uint32_t to, const balance_plan& plan,
          double busy_from, double busy_to) {
  auto& st = self->state;
  auto* job = live_job(st, plan.job_id);
  if (job == nullptr) {
    end_move(self);
    return;
  }
  std::vector<std::array<uint32_t, 3>> moves;
  uint64_t bytes = 0;
  for (auto& [t, c] : plan.chunks) {
    moves.push_back({t, c, to});
    bytes += uint64_t{job->routes->layout(t).length(c)} * sizeof(float);
  }
  shard_move m{plan.job_id, job->routes->remapped(moves), from, to};
  auto count = plan.chunks.size();
  auto started = clock_type::now();
  self->request(st.shards[to], st.settings.shard_setup_timeout, expect_atom::value, m)
    .then(
      [=](ok_atom) {
        auto* job = live_job(self->state, m.job_id);
        if (job == nullptr) { // it ended meanwhile: its shards drop it whole
          end_move(self);
          return;
        }
        job->routes = m.next; // workers joining from now on are bound by them
        tell_pollers(self, route_change{m.job_id, m.next, {}, false}, [=] {
          migrate(self, m, count, bytes, busy_from, busy_to, started);
        });
      },
      [=](caf::error& err) {
        spdlog::warn("balance: job {}: shard {} would not take chunks from shard {}: {}",
                     m.job_id, to, from, to_string(err));
        end_move(self);
      });
}

// Asks the busy shard what it would give, and moves it.
void start_move(rack_ptr self, uint32_t from, uint32_t to, double busy_from,
                double busy_to) {
  auto& st = self->state;
  st.balance.moving = true;
  double share = (busy_from - busy_to) / (2 * busy_from);
  self->request(st.shards[from], st.settings.shard_setup_timeout, plan_atom::value, share)
    .then(
      [=](balance_plan& plan) {
        auto& b = self->state.balance;
        if (plan.chunks.empty()) {
          auto why = fmt::format("shard {} (busy {:.0f}%) is busier than shard {} (busy "
                                 "{:.0f}%) but gives nothing: {}",
                                 from, busy_from * 100, to, busy_to * 100, plan.why_none);
          if (why != b.last_refusal)
            spdlog::info("balance: {}", why);
          b.last_refusal = std::move(why);
          end_move(self);
          return;
        }
        b.last_refusal.clear();
        move(self, from, to, plan, busy_from, busy_to);
      },
      [=](caf::error& err) {
        spdlog::warn("balance: shard {} gave no plan: {}", from, to_string(err));
        end_move(self);
      });
}

// The shards' CPU times now (negative: no answer): compares them with the last sample.
void judge(rack_ptr self, const std::vector<int64_t>& busy) {
  auto& st = self->state;
  auto& b = st.balance;
  auto now = clock_type::now();
  bool whole = std::none_of(busy.begin(), busy.end(), [](int64_t x) { return x < 0; });
  bool comparable = whole && b.busy_ns.size() == busy.size();
  std::vector<double> frac(busy.size(), 0);
  auto wall = std::chrono::duration<double, std::nano>(now - b.sampled).count();
  for (size_t i = 0; comparable && i < busy.size(); ++i) {
    if (uint64_t(busy[i]) < b.busy_ns[i]) // a restarted shard: its thread is new
      comparable = false;
    else
      frac[i] = double(uint64_t(busy[i]) - b.busy_ns[i]) / wall;
  }
  b.busy_ns.assign(busy.begin(), busy.end());
  b.sampled = now;
  if (!comparable || b.moving) {
    b.streak = 0;
    return;
  }
  // A window in which no shard was busy says nothing either way: the streak stands.
  // (Steps come in bursts: between them every shard idles, and 100 ms windows that fell
  // there reset the streak, so a skewed job moved late or never.)
  if (std::none_of(frac.begin(), frac.end(), [](double f) { return f >= min_busy; }))
    return;
  if (b.report) { // what the last move did
    b.report = false;
    std::vector<std::string> shown;
    for (auto f : frac)
      shown.push_back(fmt::format("{:.0f}%", f * 100));
    spdlog::info("balance: shards busy [{}] since the last move", fmt::join(shown, ", "));
  }
  // Per NUMA domain (shards with the same endpoints), its busiest and least busy shard.
  uint32_t hi = UINT32_MAX;
  uint32_t lo = UINT32_MAX;
  double gap = 0;
  auto& eps = st.settings.shard_endpoints;
  for (uint32_t i = 0; i < frac.size(); ++i)
    for (uint32_t j = 0; j < frac.size(); ++j) {
      bool same = eps.empty() || (i < eps.size() && j < eps.size() && eps[i] == eps[j]);
      if (i == j || !same || frac[i] < min_busy || frac[i] - frac[j] < min_gap
          || frac[i] <= st.settings.balance_ratio * frac[j] || frac[i] - frac[j] <= gap)
        continue;
      hi = i;
      lo = j;
      gap = frac[i] - frac[j];
    }
  if (hi == UINT32_MAX) {
    b.streak = 0;
    return;
  }
  b.streak = hi == b.busiest ? b.streak + 1 : 1;
  b.busiest = hi;
  spdlog::debug(
    "balance: shard {} busy {:.0f}%, shard {} busy {:.0f}% ({} sample(s) in a "
    "row)",
    hi, frac[hi] * 100, lo, frac[lo] * 100, b.streak);
  if (b.streak < st.settings.balance_windows)
    return;
  start_move(self, hi, lo, frac[hi], frac[lo]);
}

} // namespace

void on_balance(rack_ptr self) {
  auto& st = self->state;
  if (st.settings.balance_interval.count() <= 0)
    return;
  self->delayed_send(self, st.settings.balance_interval, balance_atom::value);
  if (st.shards.size() < 2 || st.balance.moving)
    return;
  // Read from the shards' threads' CPU clocks, not asked by message: a busy shard's
  // answer would wait behind its pushes (runtime/thread_cpu.hpp).
  std::vector<int64_t> busy(st.shards.size(), -1);
  for (size_t i = 0; i < busy.size() && i < st.settings.shard_cpu.size(); ++i)
    if (auto& slot = st.settings.shard_cpu[i])
      if (auto ns = slot->read_ns())
        busy[i] = static_cast<int64_t>(*ns);
  judge(self, busy);
}

} // namespace rw::actors::detail
