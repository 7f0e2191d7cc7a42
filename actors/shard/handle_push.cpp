// The data path: a push (a gradient), an init (version 0) and a pull, each checked
// against the job's routes and counted on its chunk.

#include "actors/shard/handlers.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

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
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/trace.hpp"

namespace rw::actors::shard_impl {

void on_push(shard_core& self, chunk_push& p) {
  auto& st = self.state;
  if (p.rank == protocol::mirror_rank) {
    on_mirror_push(self, p);
    return;
  }
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.clock);
  if (job == nullptr || detail::stale_push(*job, p)
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::a_push, &p,
                           nullptr))
    return;
  if (job->holding) { // a move's first phase: counted (or dropped) once the fence comes
    job->held.push_back(std::move(p));
    return;
  }
  auto& cs = job->chunks[job->routes->local_index(p.tensor, p.chunk)];
  auto hdr = about(p.job_id, p.rank, p.tensor, p.chunk, p.clock);
  // A replica takes each step's sum from its home (on_mirror_push), never a worker's
  // push: one routed here by a ring the job has left is dropped, and sent again.
  const bool owned = job->routes->is_owned(p.tensor, p.chunk);
  if (!owned)
    return;
  if (p.payload->size != size_t{cs.length()} * sizeof(float)) {
    p.conn->send_error(errc::bad_chunk,
                       fmt::format("chunk {}/{} holds {} bytes, push carries {}",
                                   p.tensor, p.chunk, cs.length() * sizeof(float),
                                   p.payload->size),
                       hdr);
    return;
  }
  if (job->settling && !detail::settling_admits(*job, p.tensor, cs, p.clock))
    return; // it would begin a step while the job moves: sent again after the reroute
  bool check_departed = job->departed_count > 0 && cs.push_needs_everyone(p.want_result);
  for (uint32_t r = 0; check_departed && r < job->departed.size(); ++r) {
    // (A rank's own push may be served after its leave: the backlog reorders.)
    if (r != p.rank && job->departed[r] && !cs.has_pushed(r, p.clock)) {
      p.conn->send_error(
        errc::worker_left,
        fmt::format("job '{}': rank {} has left, clock {} cannot complete",
                    job->spec.name, r, p.clock),
        hdr);
      return;
    }
  }
  ++st.book->stats.pushes;
  auto bytes = p.payload->size;
  st.book->stats.bytes_in += bytes;
  const auto arrived_at = clock_type::now();
  auto result = [&] {
    runtime::trace::scope traced{
      "push", "shard", {p.job_id, p.rank, p.tensor, p.chunk, p.clock}};
    return cs.push(p.rank, p.clock, std::move(p.payload), arrived_at);
  }();
  switch (result) {
    case detail::chunk_state::outcome::duplicate:
      // Counted before (a restarted worker goes on from its first clock not counted
      // everywhere; a proxy re-sends what it had no answer to): dropped, and answered
      // as the first push was.
      ++st.book->stats.duplicates;
      answer_push(st, *job, p, cs, true);
      return;
    case detail::chunk_state::outcome::too_far_ahead:
      p.conn->send_error(errc::clock_out_of_range,
                         fmt::format("push for clock {} of chunk {}/{} is more than one "
                                     "step ahead of version {}; not applied",
                                     p.clock, p.tensor, p.chunk, cs.version()),
                         hdr);
      return;
    default: break;
  }
  cs.add_load(cs.length() + detail::push_load_overhead);
  if (job->spec.consistency.model == consistency_spec::bsp)
    if (auto m = job->lateness.arrived(p.rank, p.clock, arrived_at, job->owned_chunks,
                                       static_cast<uint32_t>(job->departed.size())
                                         - job->departed_count);
        m && runtime::trace::on())
      // On the timeline: from the first rank's last chunk of the step to the slowest's.
      runtime::trace::span("slowest rank", "shard", runtime::trace::ns_of(m->first),
                           runtime::trace::ns_of(m->last)
                             - runtime::trace::ns_of(m->first),
                           {p.job_id, m->slowest, runtime::trace::about::none,
                            runtime::trace::about::none, m->clock});
  if (p.rank < job->counters.size()) { // counted once accepted
    auto& counted = job->counters[p.rank];
    ++counted.pushes;
    counted.bytes_in += bytes;
    counted.clock = std::max(counted.clock, p.clock + 1);
  }
  answer_push(st, *job, p, cs, false);
  run_steps(self, p.job_id, *job, p.tensor, p.chunk, cs);
}

void on_init(shard_core& self, chunk_push& p) {
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.clock);
  if (job == nullptr || detail::stale_ring(*job, p)
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::an_init, &p,
                           nullptr))
    return;
  auto& cs = job->chunks[job->routes->local_index(p.tensor, p.chunk)];
  auto hdr = about(p.job_id, p.rank, p.tensor, p.chunk, 0);
  const auto& tensor = job->spec.tensors[p.tensor];
  const bool owned = job->routes->is_owned(p.tensor, p.chunk); // replicas answer nobody
  bool repeated = p.rank == job->init_rank && tensor.has_init && cs.initialized();
  if (repeated) { // the init rank restarted and sends version 0 again: already set
    if (!owned) {
      replica_ack(p.conn, hdr);
      return;
    }
    auto ack = hdr;
    ack.kind = frame_kind::ack;
    p.conn->send(ack);
    return;
  }
  if (p.rank != job->init_rank || !tensor.has_init
      || p.payload->size != size_t{cs.length()} * sizeof(float)
      || !cs.init(p.payload->floats())) {
    if (!owned)
      return;
    p.conn->send_error(
      errc::bad_chunk,
      fmt::format("init of chunk {}/{} refused: only rank 0 initialises, "
                  "once, a tensor declared with initial values",
                  p.tensor, p.chunk),
      hdr);
    return;
  }
  if (job->relay) // the chunk's home and the other racks start from these values too
    job->relay->init(p.tensor, p.chunk, p.payload->floats());
  if (owned) {
    auto ack = hdr;
    ack.kind = frame_kind::ack;
    p.conn->send(ack);
  } else {
    replica_ack(p.conn, hdr);
  }
  run_steps(self, p.job_id, *job, p.tensor, p.chunk, cs);
  answer_ready(self.state, p.job_id, *job, p.tensor, p.chunk, cs);
}

void on_pull(shard_core& self, chunk_pull& p) {
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.min_version);
  if (job == nullptr
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::a_pull, nullptr,
                           &p))
    return;
  auto& cs = job->chunks[job->routes->local_index(p.tensor, p.chunk)];
  if (!p.subscribe && p.rank < job->counters.size())
    ++job->counters[p.rank].pulls;
  if (!p.subscribe && !cs.may_wait(p.conn)) {
    p.conn->send_error(errc::too_many_requests,
                       fmt::format("{} pulls of chunk {}/{} from this connection wait "
                                   "already (at most {}): wait for their answers",
                                   defaults::max_waiting_pulls, p.tensor, p.chunk,
                                   defaults::max_waiting_pulls),
                       about(p.job_id, p.rank, p.tensor, p.chunk, p.min_version));
    return;
  }
  if (p.subscribe) {
    cs.subscribe({p.conn, p.rank, UINT64_MAX});
    answer_ready(self.state, p.job_id, *job, p.tensor, p.chunk,
                 cs); // the current version
    return;
  }
  if (p.only_changed) {
    auto hdr = about(p.job_id, p.rank, p.tensor, p.chunk, p.min_version);
    if (p.min_version > cs.version()) {
      p.conn->send_error(errc::clock_out_of_range,
                         fmt::format("changes since version {} of chunk {}/{} asked for, "
                                     "which is at version {}: a version from the future",
                                     p.min_version, p.tensor, p.chunk, cs.version()),
                         hdr);
      return;
    }
    if (cs.initialized() && p.min_version == cs.version()) {
      hdr.kind = frame_kind::ack; // unchanged: nothing to send
      hdr.flags = protocol::flag_only_changed;
      p.conn->send(hdr);
      return;
    }
    cs.wait(waiting({p.conn, p.rank, p.min_version + 1}));
    answer_ready(self.state, p.job_id, *job, p.tensor, p.chunk, cs);
    return;
  }
  if (p.min_version > cs.version() + 1) {
    p.conn->send_error(errc::clock_out_of_range,
                       fmt::format("pull asks for version {} of chunk {}/{}, which is at "
                                   "version {}: a version from the future",
                                   p.min_version, p.tensor, p.chunk, cs.version()),
                       about(p.job_id, p.rank, p.tensor, p.chunk, p.min_version));
    return;
  }
  cs.wait(waiting({p.conn, p.rank, p.min_version}));
  answer_ready(self.state, p.job_id, *job, p.tensor, p.chunk, cs);
}

} // namespace rw::actors::shard_impl
