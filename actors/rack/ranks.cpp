// A job's ranks on the node: who joins (first time, or again after a crash or a bye),
// where a joining rank goes on from, who leaves and how long the job waits for a rank
// that went away without bye.

#include <algorithm>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "logic/limited_log.hpp"
#include "actors/rack/state.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

job_binding joined(const job_info& job, uint32_t rank, bool created) {
  job_binding b;
  b.job_id = job.id;
  b.created = created;
  b.routes = job.routes;
  b.token = job.ranks.token(rank);
  b.chunk_bytes = job.spec.chunk_bytes;
  b.params_segment = job.params ? job.params->name() : std::string{};
  b.layout = job.layout;
  b.node_index = job.node_index;
  b.shard_rank = job.shard_rank(rank);
  b.spec = std::make_shared<const job_spec>(job.spec);
  b.compression = job.spec.compression;
  return b;
}

job_binding join_rank(rack_ptr self, job_info& job, uint32_t rank,
                      const std::string& peer) {
  auto joining = job.ranks.join(rank, peer, runtime::random_u64());
  if (joining.refused) {
    auto why = fmt::format("rank {} of job '{}' is already held by a connected worker",
                           rank, job.spec.name);
    log_limited(spdlog::level::warn, peer, "hello refused: peer={}: {}",
                fmt::format("hello refused: peer={}: {}", peer, why));
    return refuse(errc::rank_taken, why);
  }
  switch (joining.was) {
    case rank_status::absent:
      spdlog::info("worker joined: job='{}' id={} rank={} peer={}", job.spec.name, job.id,
                   rank, peer);
      break;
    case rank_status::away:
      spdlog::info("worker rejoined: job='{}' id={} rank={} peer={}: back {} ms after it "
                   "went away ({})",
                   job.spec.name, job.id, rank, peer, joining.away_for.count(),
                   joining.away_reason);
      break;
    case rank_status::left:
      spdlog::info("worker rejoined: job='{}' id={} rank={} peer={}: after its bye",
                   job.spec.name, job.id, rank, peer);
      for (auto& s : self->state.shards) // steps may need the rank again
        self->send(s, rejoin_atom::value, job.id, job.shard_rank(rank));
      break;
    case rank_status::live: break;
  }
  return joined(job, rank, false);
}

namespace {

struct resume_gather {
  job_binding b;
  size_t remaining;
  uint64_t lowest = UINT64_MAX;
  binding_promise rp;
};

// Asks shard `i` where the rank goes on from. A shard that died meanwhile answers
// request_receiver_down: its supervisor's successor is asked instead, once the
// coordinator knows it (replace_atom), a bounded number of times.
void ask_resume(rack_ptr self, std::shared_ptr<resume_gather> g, uint32_t i,
                int attempts) {
  auto& st = self->state;
  auto asked = st.shards[i];
  self
    ->request(asked, st.settings.shard_setup_timeout, resume_atom::value, g->b.job_id,
              g->b.shard_rank)
    .then(
      [=](uint64_t clock) {
        g->lowest = std::min(g->lowest, clock);
        if (--g->remaining > 0 || !g->rp.pending())
          return;
        g->b.resume_clock = g->lowest == UINT64_MAX ? 0 : g->lowest;
        if (g->b.resume_clock > 0)
          spdlog::info("job id={}: rank (shard rank {}) goes on from clock {}",
                       g->b.job_id, g->b.shard_rank, g->b.resume_clock);
        g->rp.deliver(g->b);
      },
      [=](caf::error& err) {
        if (attempts > 1 && err == caf::sec::request_receiver_down) {
          if (self->state.shards[i] != asked)
            ask_resume(self, g, i, attempts - 1); // the successor is known already
          else
            self->state.on_shard_replaced[i].push_back(
              [=] { ask_resume(self, g, i, attempts - 1); });
          return;
        }
        if (g->rp.pending())
          g->rp.deliver(refuse(errc::internal,
                               fmt::format("shard {} did not say where the rank goes on "
                                           "from: {}",
                                           i, describe(self->system(), err))));
      });
}

} // namespace

void answer_with_resume(rack_ptr self, job_binding b, binding_promise rp) {
  auto& st = self->state;
  if (b.code != errc::ok || st.shards.empty()) {
    rp.deliver(std::move(b));
    return;
  }
  auto g = std::make_shared<resume_gather>(
    resume_gather{std::move(b), st.shards.size(), UINT64_MAX, std::move(rp)});
  for (uint32_t i = 0; i < st.shards.size(); ++i)
    ask_resume(self, g, i, 5);
}

void on_leave(rack_ptr self, uint32_t job_id, uint32_t rank, bool graceful,
              const std::string& reason) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return; // the job already ended
  auto& job = st.jobs.at(n->second);
  auto out = job.ranks.leave(rank, graceful, reason);
  if (out.what == rank_book::leaving::ignored
      || out.what == rank_book::leaving::still_connected)
    return; // not a live rank, or its other connections are still up
  if (out.what == rank_book::leaving::away) {
    // Its steps wait: a restarted worker with the same rank goes on where it stopped.
    spdlog::warn("worker away: job='{}' id={} rank={} disconnected without saying bye "
                 "({}); its steps wait up to {} ms (--rejoin-timeout-ms) for a worker "
                 "that joins again as rank {}",
                 job.spec.name, job_id, rank, reason, st.settings.rejoin_timeout.count(),
                 rank);
    self->delayed_send(self, st.settings.rejoin_timeout, rejoin_atom::value, job_id, rank,
                       out.departure);
    return;
  }
  spdlog::info("worker left: job='{}' id={} rank={} (bye)", job.spec.name, job_id, rank);
  // Every rank that joins on this node has said bye.
  if (job.ranks.all_left([&](uint32_t r) { return job.belongs(r); })) {
    end_job(self, job_id, "finished", errc::ok, "every worker said bye");
    return;
  }
  auto why = fmt::format("job '{}' (id {}): worker rank {} left the job", job.spec.name,
                         job_id, rank);
  for (auto& s : st.shards)
    self->send(s, leave_atom::value, job_id, job.shard_rank(rank), why);
}

void on_rejoin_window(rack_ptr self, uint32_t job_id, uint32_t rank, uint32_t departure) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return;
  auto& job = st.jobs.at(n->second);
  if (!job.ranks.still_away(rank, departure))
    return; // back meanwhile (or away again, with a window of its own)
  auto why = fmt::format("job '{}' (id {}): worker rank {} disconnected mid-job ({}) and "
                         "did not join again within {} ms (--rejoin-timeout-ms)",
                         job.spec.name, job_id, rank, job.ranks.away_reason(rank),
                         st.settings.rejoin_timeout.count());
  spdlog::warn("{}", why);
  end_job(self, job_id, "failed", errc::worker_left, why);
}

} // namespace rw::actors::detail
