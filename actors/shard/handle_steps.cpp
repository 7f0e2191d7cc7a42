// A chunk's step: its answers (updates, acks), running the steps it is ready for, and a
// layer-wise tensor's norms and trust ratio between its shards.

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

frame_header about(uint32_t job, uint32_t rank, uint32_t tensor, uint32_t chunk,
                   uint64_t clock) {
  frame_header h;
  h.job_id = job;
  h.rank = rank;
  h.tensor_id = tensor;
  h.chunk_index = chunk;
  h.clock = clock;
  return h;
}

void send_update(shard_state& st, uint32_t job_id, shard_job& job, uint32_t tensor,
                 uint32_t chunk, const detail::chunk_state& cs, const detail::waiter& w,
                 uint16_t flags) {
  if (w.ack_only) { // a push of a replicated chunk: its step is on the replica too
    auto ack = about(job_id, w.rank, tensor, chunk, w.version - 1);
    ack.kind = frame_kind::ack;
    st.answers.send(w.conn, ack);
    return;
  }
  auto h = about(job_id, w.rank, tensor, chunk, cs.version());
  h.kind = frame_kind::update;
  h.flags = flags;
  h.staleness = static_cast<uint32_t>(cs.staleness(w));
  h.payload_bytes = cs.length() * sizeof(float);
  iovec payload{const_cast<float*>(cs.params()), h.payload_bytes};
  // compress_updates: the parameters as 16-bit values, to a worker whose chunks travel
  // (over shared memory the worker reads them in place and rounds its copy the same way).
  if (job.spec.compression.updates && !w.conn->resident()) {
    auto flag = protocol::half_flag(job.spec.compression);
    auto& packed = cs.packed(flag);
    h.flags |= flag;
    h.payload_bytes = static_cast<uint32_t>(packed.size());
    payload = {const_cast<std::byte*>(packed.data()), packed.size()};
  }
  runtime::trace::scope traced{
    "answer", "shard", {job_id, w.rank, tensor, chunk, h.clock}};
  if (st.held.active() && st.held.delay(tensor).count() > 0)
    st.held.hold(w.conn, h, payload.iov_base, payload.iov_len, clock_type::now());
  else if (!st.answers.send(w.conn, h, payload, cs.params()))
    return;
  st.book->stats.bytes_out += h.payload_bytes;
  if (w.rank < job.counters.size()) {
    auto& n = job.counters[w.rank];
    n.bytes_out += h.payload_bytes;
    if (w.since != clock_type::time_point{})
      n.wait_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - w.since)
          .count());
  }
}

void answer_ready(shard_state& st, uint32_t job_id, shard_job& job, uint32_t tensor,
                  uint32_t chunk, detail::chunk_state& cs) {
  for (auto& w : cs.take_ready(st.settings.priority))
    send_update(st, job_id, job, tensor, chunk, cs, w);
  // Eager notification: subscribers get each new version without asking.
  for (auto& w : cs.publish())
    send_update(st, job_id, job, tensor, chunk, cs, w, protocol::flag_subscribe);
}

// A request about to wait for an answer, stamped so its wait is counted.
detail::waiter waiting(detail::waiter w) {
  w.since = clock_type::now();
  return w;
}

// A request for a chunk whose state is on its way from another shard of the node
// (in-node balancing): kept, in order, until it has come. Whether it was.
bool stash_if_arriving(shard_job& job, uint32_t tensor, uint32_t chunk,
                       shard_job::stashed::kind_t kind, chunk_push* push,
                       chunk_pull* pull) {
  if (!job.awaits(tensor, chunk))
    return false;
  shard_job::stashed s{kind, {}, {}};
  if (push != nullptr)
    s.push = std::move(*push);
  if (pull != nullptr)
    s.pull = std::move(*pull);
  job.stash.push_back(std::move(s));
  return true;
}

// A periodic checkpoint's copies of every chunk here, for the coordinator to write.
void send_periodic(shard_core& self, uint32_t job_id, shard_job& job, uint64_t clock,
                   chunk_snapshot snap) {
  if (snap.chunks && job.coordinator)
    job.coordinator->checkpointed(job_id, clock, std::move(snap));
}

// A chunk of the job finished a step. Once the job's chunks here have finished as many
// steps as there are chunks (in BSP: once the lowest chunk clock moves on), the
// coordinator hears the job's new clock on this shard (its step times, /metrics).
void count_step(shard_core& self, uint32_t job_id, shard_job& job) {
  ++self.state.book->stats.updates;
  if (job.chunks.empty())
    return;
  auto clock = ++job.steps_done / job.chunks.size();
  if (clock <= job.clock_told)
    return;
  job.clock_told = clock;
  if (job.coordinator)
    job.coordinator->stepped(job_id, self.state.settings.index,
                             static_cast<uint64_t>(clock));
}

// Runs every step the chunk is ready for. A layer-wise step (LAMB, LARS) only prepares:
// its share of the tensor's norms goes to the tensor's home shard, and the step ends
// when the trust ratio comes back (on_trust).
void run_steps(shard_core& self, uint32_t job_id, shard_job& job, uint32_t tensor,
               uint32_t chunk, detail::chunk_state& cs) {
  run_ready_steps(self, job_id, job, tensor, chunk, cs);
  detail::check_settled(job, self.state.settings.index); // a moving job's chunks
}

void run_ready_steps(shard_core& self, uint32_t job_id, shard_job& job, uint32_t tensor,
                     uint32_t chunk, detail::chunk_state& cs) {
  auto& st = self.state;
  while (cs.step_ready()) {
    if (!job.pending_hyper.empty() && cs.version() >= detail::held_from(job))
      return; // a hyper-parameter change for this clock is being agreed on: it decides
    if (job.mirror && !cs.summed() && job.routes->is_owned(tensor, chunk)) {
      auto node = job.routes->mirror_of(tensor, chunk);
      if (node != runtime::routing_table::not_here) {
        // The replica gets the step's sum first; its ack runs the step (on_mirrored).
        auto clock = cs.version();
        const float* sum = cs.prepare_mirror();
        job.mirror->send(st.settings.index, tensor, chunk, clock, job.ring_version, node,
                         sum, cs.length());
        return;
      }
    }
    if (
      job
        .relay) { // the rack's partial goes to the chunk's home; its answer ends the step
      auto clock = cs.version();
      job.relay->push(tensor, chunk, clock, cs.prepare_relay());
      return;
    }
    if (runtime::is_layerwise(job.spec.optimizer.kind)) {
      auto version = cs.version();
      auto parts = cs.prepare_layerwise(job.spec.optimizer, job.rescale);
      auto home = job.routes->shard_of(tensor, 0);
      job.peers->norm(home, job_id, tensor, version, chunk, parts.w2, parts.d2);
      return;
    }
    if (st.answers.points_at(cs.params()))
      st.answers.flush(); // answers held point at the parameters this step changes
    {
      runtime::trace::scope traced{
        "step",
        "shard",
        {job_id, runtime::trace::about::none, tensor, chunk, cs.version()}};
      cs.complete_step(detail::optimizer_for(job, cs.version()), job.rescale,
                       clock_type::now());
    }
    count_step(self, job_id, job);
    if (detail::checkpoint_clock(job, cs.version())) // before the next step can run here
      send_periodic(self, job_id, job, cs.version(),
                    detail::checkpoint_reached(job, tensor, chunk, cs));
    answer_ready(st, job_id, job, tensor, chunk, cs);
  }
}

void on_norm(shard_core& self, uint32_t job_id, uint32_t tensor, uint64_t version,
             uint32_t chunk, double w2, double d2) {
  auto it = self.state.book->jobs.find(job_id);
  if (it == self.state.book->jobs.end())
    return; // the job ended meanwhile
  auto& job = it->second;
  auto count = job.routes->layout(tensor).count();
  auto& parts = job.norms[{tensor, version}];
  parts.resize(count);
  parts[chunk] = runtime::norm_parts{w2, d2};
  for (auto& p : parts)
    if (!p)
      return;
  runtime::norm_parts total; // in chunk order: the same ratio whatever the arrival order
  for (auto& p : parts) {
    total.w2 += p->w2;
    total.d2 += p->d2;
  }
  job.norms.erase({tensor, version});
  auto trust = runtime::layerwise_trust(job.spec.optimizer, total);
  std::vector<bool> told(job.peers->size(), false);
  for (uint32_t c = 0; c < count; ++c) {
    auto owner = job.routes->shard_of(tensor, c);
    if (told[owner])
      continue;
    told[owner] = true;
    job.peers->trust(owner, job_id, tensor, version, trust);
  }
}

void on_trust(shard_core& self, uint32_t job_id, uint32_t tensor, uint64_t version,
              float trust) {
  auto it = self.state.book->jobs.find(job_id);
  if (it == self.state.book->jobs.end())
    return;
  auto& job = it->second;
  auto& layout = job.routes->layout(tensor);
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (job.routes->shard_of(tensor, c) != self.state.settings.index)
      continue;
    auto& cs = job.chunks[job.routes->local_index(tensor, c)];
    if (!cs.layerwise_pending() || cs.version() != version)
      continue;
    cs.finish_layerwise(job.spec.optimizer, trust, clock_type::now());
    count_step(self, job_id, job);
    if (detail::checkpoint_clock(job, cs.version()))
      send_periodic(self, job_id, job, cs.version(),
                    detail::checkpoint_reached(job, tensor, c, cs));
    answer_ready(self.state, job_id, job, tensor, c, cs);
    run_steps(self, job_id, job, tensor, c, cs); // pushes held for the next step
  }
}

// Where a push of a chunk homed here waits for its answer: the new version (push_pull),
// or an ack; a replicated chunk's ack waits until its step is on the replica too. A
// repeat (`counted_before`) is answered at once if its answer is there.
void answer_push(shard_state& st, shard_job& job, chunk_push& p, detail::chunk_state& cs,
                 bool counted_before) {
  if (p.want_result
      || job.routes->mirror_of(p.tensor, p.chunk) != runtime::routing_table::not_here) {
    auto w = waiting(cs.push_waiter(p.conn, p.rank, p.clock));
    w.ack_only = !p.want_result; // BSP: version clock + 1 is the step's
    if (!counted_before) {
      cs.wait(std::move(w));
      return;
    }
    // A repeat: answered at once if its version exists, else once when it does, however
    // often it comes meanwhile.
    if (cs.wait_once(std::move(w)))
      answer_ready(st, p.job_id, job, p.tensor, p.chunk, cs);
    return;
  }
  auto ack = about(p.job_id, p.rank, p.tensor, p.chunk, p.clock);
  ack.kind = frame_kind::ack;
  st.answers.send(p.conn, ack);
}

} // namespace rw::actors::shard_impl
