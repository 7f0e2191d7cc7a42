// Replicas and relays: a home's step sum on its way to a replica, a replica's step, a
// hierarchical job's rack part, and the chunks that go on after a node died (takeover).

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

// A replica took an init, or its home's sum of a step (protocol::flag_replica).
void replica_ack(const transports::connection_ptr& conn, frame_header hdr) {
  hdr.kind = frame_kind::ack;
  hdr.flags = protocol::flag_replica;
  hdr.payload_bytes = 0;
  conn->send(hdr);
}

// At a chunk's replica: its home's sum of step p.clock (actors/links/mirror_link), taken as the
// whole step, acked, and applied in order. Taken while the job settles or is frozen for
// a move too: the home's step waits for this ack, and a replica is rebuilt from its
// home's copy after a move anyway.
void on_mirror_push(shard_core& self, chunk_push& p) {
  auto& st = self.state;
  auto hdr = about(p.job_id, p.rank, p.tensor, p.chunk, p.clock);
  auto it = st.book->jobs.find(p.job_id);
  if (it == st.book->jobs.end()) {
    refuse_missing_job(st, p.conn, hdr);
    return;
  }
  auto& job = it->second;
  if (job.routes->shard_of(p.tensor, p.chunk) != st.settings.index
      || job.routes->is_owned(p.tensor, p.chunk) || detail::stale_ring(job, p))
    return; // routed by another ring: the home sends it again by its new one
  auto& cs = job.chunks[job.routes->local_index(p.tensor, p.chunk)];
  if (p.payload->size != size_t{cs.length()} * sizeof(float)) {
    p.conn->send_error(
      errc::bad_chunk,
      fmt::format("chunk {}/{} holds {} bytes, the mirrored sum carries {}", p.tensor,
                  p.chunk, cs.length() * sizeof(float), p.payload->size),
      hdr);
    return;
  }
  st.book->stats.bytes_in += p.payload->size;
  auto result = cs.push_total(p.clock, std::move(p.payload));
  if (result == detail::chunk_state::outcome::too_far_ahead) {
    p.conn->send_error(errc::clock_out_of_range,
                       fmt::format("the sum of step {} of chunk {}/{} is ahead of the "
                                   "replica's version {}",
                                   p.clock, p.tensor, p.chunk, cs.version()),
                       hdr);
    return;
  }
  hdr.kind = frame_kind::ack;
  hdr.flags = protocol::flag_replica;
  if (st.answers.add_replica_ack(p.conn, hdr)) // behind the sums queued now: together
    self.out.flush_later();
  if (result == detail::chunk_state::outcome::duplicate) {
    ++st.book->stats.duplicates;
    return;
  }
  run_steps(self, p.job_id, job, p.tensor, p.chunk, cs);
}

// At a chunk's home: its replica has the sum of step `clock`; the step runs.
void on_mirrored(shard_core& self, uint32_t job_id, uint32_t tensor, uint32_t chunk,
                 uint64_t clock) {
  auto& st = self.state;
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end())
    return;
  auto& job = it->second;
  if (job.routes->shard_of(tensor, chunk) != st.settings.index)
    return;
  auto& cs = job.chunks[job.routes->local_index(tensor, chunk)];
  if (!cs.mirror_pending() || cs.version() != clock)
    return; // an ack of a repeat
  cs.end_mirror();
  run_steps(self, job_id, job, tensor, chunk, cs);
}

// A hierarchical job's chunk, back from its home: the initial values (version 0, for
// racks whose workers had none to give) or the result of the step the rack's partial
// went into.
void on_relay(shard_core& self, const relay_update& u) {
  auto it = self.state.book->jobs.find(u.job_id);
  if (it == self.state.book->jobs.end())
    return; // the job ended meanwhile
  auto& job = it->second;
  auto& cs = job.chunks[job.routes->local_index(u.tensor, u.chunk)];
  if (u.data == nullptr) {
    for (auto& w : cs.take_all())
      w.conn->send_error(u.code, u.why,
                         about(u.job_id, w.rank, u.tensor, u.chunk, w.version));
    return;
  }
  if (u.version == 0) {
    cs.init(u.data); // rack 0 has them already: then this changes nothing
  } else if (cs.relay_pending() && u.version == cs.version() + 1) {
    cs.finish_relay(u.data, clock_type::now());
    count_step(self, u.job_id, job);
  } else {
    spdlog::warn(
      "job {}: chunk {}/{} at version {} got version {} from its home; dropped", u.job_id,
      u.tensor, u.chunk, cs.version(), u.version);
    return;
  }
  answer_ready(self.state, u.job_id, job, u.tensor, u.chunk, cs);
  run_steps(self, u.job_id, job, u.tensor, u.chunk, cs); // pushes held for the next step
}

// Steps whose sum waits for a replica's ack: sent again to the replica the job's routes
// name now, or, where they name none (a takeover leaves the job without replicas), run
// at once.
void remirror(shard_core& self, uint32_t job_id, shard_job& job) {
  auto& st = self.state;
  for_each_own_chunk(st, job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
    if (!cs.mirror_pending() || !job.mirror)
      return true;
    auto node = job.routes->mirror_of(t, c);
    if (node == runtime::routing_table::not_here) {
      job.mirror->cancel(t, c);
      cs.end_mirror();
      run_steps(self, job_id, job, t, c, cs);
    } else {
      // The sum is still in the chunk's d (nothing runs until the ack).
      job.mirror->send(st.settings.index, t, c, cs.version(), job.ring_version, node,
                       cs.mirror_sum(), cs.length());
    }
    return true;
  });
}

// A node of the job died: the chunks here go on by the new routes, state and all
// (chunk_shard.hpp, "takeover").
shard_refusal on_takeover(shard_core& self, route_change& rc) {
  auto& st = self.state;
  auto it = st.book->jobs.find(rc.job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, rc.job_id);
  size_t released = 0;
  if (auto why = detail::retarget(it->second, st.settings.index, rc, released);
      !why.empty())
    return {errc::internal, why};
  st.book->stats.chunks -= released;
  remirror(self, rc.job_id, it->second);
  return {};
}

} // namespace rw::actors::shard_impl
