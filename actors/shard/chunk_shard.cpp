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

namespace rw::actors {

namespace {

using clock_type = std::chrono::steady_clock;
using transports::frame_header;
using transports::frame_kind;

constexpr size_t max_tombstones = 256;
// Backlog pushes served per work token: enough that their answers share system calls,
// few enough that a push arriving meanwhile with a lower clock waits little.
constexpr int max_served_per_work = 32;

using detail::shard_book;
using detail::shard_job;

struct shard_state {
  shard_settings settings;
  std::shared_ptr<shard_book> book; // outlives the shard: its successor adopts it
  // Updates and acks, held while one message serves many chunks (logic/shard_answers).
  detail::shard_answers answers;
  static inline const char* name = "rw.chunk_shard";
};

using shard_ptr = chunk_shard_actor::stateful_pointer<shard_state>;

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
                 uint16_t flags = 0) {
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
    auto flag = transports::half_flag(job.spec.compression);
    auto& packed = cs.packed(flag);
    h.flags |= flag;
    h.payload_bytes = static_cast<uint32_t>(packed.size());
    payload = {const_cast<std::byte*>(packed.data()), packed.size()};
  }
  runtime::trace::scope traced{"answer", "shard", {job_id, w.rank, tensor, chunk, h.clock}};
  if (!st.answers.send(w.conn, h, payload, cs.params()))
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
    send_update(st, job_id, job, tensor, chunk, cs, w, transports::flag_subscribe);
}

// A replica took an init, or its home's sum of a step (transports::flag_replica).
void replica_ack(const transports::connection_ptr& conn, frame_header hdr) {
  hdr.kind = frame_kind::ack;
  hdr.flags = transports::flag_replica;
  hdr.payload_bytes = 0;
  conn->send(hdr);
}

// A request about to wait for an answer, stamped so its wait is counted.
detail::waiter waiting(detail::waiter w) {
  w.since = clock_type::now();
  return w;
}

// Calls fn(tensor, chunk, state) for every chunk of `job` this shard owns, until fn
// returns false (not those whose state is still on its way from another shard).
template <class Fn>
void for_each_own_chunk(const shard_state& st, shard_job& job, Fn fn) {
  detail::for_each_chunk(job, st.settings.index,
                         [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
                           return job.awaits(t, c) || fn(t, c, cs);
                         });
}

// A request for a chunk whose state is on its way from another shard of the node
// (in-node balancing): kept, in order, until it has come. Whether it was.
bool stash_if_arriving(shard_job& job, uint32_t tensor, uint32_t chunk,
                       shard_job::stashed::kind_t kind, chunk_push* push, chunk_pull* pull) {
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

// Answers a frame for a job this shard does not hold: gone (with why), or never known.
void refuse_missing_job(const shard_state& st, const transports::connection_ptr& conn,
                        const frame_header& about) {
  auto i = st.book->tombstones.find(about.job_id);
  if (i != st.book->tombstones.end() && i->second.code == errc::moved)
    return; // routed by a ring the job left: the worker sends it again by the new one
  if (i != st.book->tombstones.end())
    conn->send_error(i->second.code, fmt::format("job {} is gone: {}", about.job_id, i->second.why),
                     about);
  else
    conn->send_error(errc::unknown_job, fmt::format("unknown job {}", about.job_id), about);
}

void bury(shard_state& st, uint32_t job_id, errc code, std::string why) {
  st.answers.flush(); // before the job's chunks (which answers held may point at) go
  st.book->jobs.erase(job_id);
  st.book->tombstones[job_id] = {code, std::move(why)};
  while (st.book->tombstones.size() > max_tombstones)
    st.book->tombstones.erase(st.book->tombstones.begin());
}

// Fails every waiter of `job` with `code` and drops the job.
void fail_job(shard_state& st, uint32_t job_id, errc code, const std::string& why) {
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end()) {
    // A job this shard does not hold (it never had chunks here, or it ended): frames for it
    // get the reason rather than "unknown job".
    bury(st, job_id, code, why);
    return;
  }
  for_each_own_chunk(st, it->second, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
    for (auto& w : cs.take_all())
      w.conn->send_error(code, why, about(job_id, w.rank, t, c, w.version));
    return true;
  });
  for (auto& p : it->second.checkpoints)
    p.rp.deliver(cluster_error(code, fmt::format("checkpoint at clock {}: the job failed: {}",
                                                 p.clock, why)));
  bury(st, job_id, code, why);
}

// Fails the waiters of steps that still need `rank` (which has left).
void fail_steps_needing(shard_state& st, uint32_t job_id, shard_job& job, uint32_t rank,
                        const std::string& why) {
  for_each_own_chunk(st, job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
    if (cs.needs(rank))
      for (auto& w : cs.take_all())
        w.conn->send_error(errc::worker_left, why, about(job_id, w.rank, t, c, w.version));
    return true;
  });
}

// The job of a request, or null (refused if the job is gone; dropped unanswered if the
// job is frozen for a move, or the chunk is not this shard's by the job's routes: it
// was routed by a ring the job has left, and the worker sends it again by the new one).
shard_job* find_job(shard_ptr self, uint32_t job_id, const transports::connection_ptr& conn,
                    uint32_t rank, uint32_t tensor, uint32_t chunk, uint64_t clock) {
  auto& st = self->state;
  auto it = st.book->jobs.find(job_id);
  if (it != st.book->jobs.end()) {
    auto& job = it->second;
    if (job.frozen || job.routes->shard_of(tensor, chunk) != st.settings.index)
      return nullptr;
    return &it->second;
  }
  refuse_missing_job(st, conn, about(job_id, rank, tensor, chunk, clock));
  return nullptr;
}

// A periodic checkpoint's copies of every chunk here, for the coordinator to write.
void send_periodic(shard_ptr self, uint32_t job_id, shard_job& job, uint64_t clock,
                   chunk_snapshot snap) {
  if (snap.chunks)
    self->send(job.coordinator, ckpt_atom::value, job_id, clock, std::move(snap));
}

// A chunk of the job finished a step. Once the job's chunks here have finished as many
// steps as there are chunks (in BSP: once the lowest chunk clock moves on), the
// coordinator hears the job's new clock on this shard (its step times, /metrics).
void count_step(shard_ptr self, uint32_t job_id, shard_job& job) {
  ++self->state.book->stats.updates;
  if (job.chunks.empty())
    return;
  auto clock = ++job.steps_done / job.chunks.size();
  if (clock <= job.clock_told)
    return;
  job.clock_told = clock;
  if (job.coordinator)
    self->send(job.coordinator, step_atom::value, job_id, self->state.settings.index,
               static_cast<uint64_t>(clock));
}

// Runs every step the chunk is ready for. A layer-wise step (LAMB, LARS) only prepares:
// its share of the tensor's norms goes to the tensor's home shard, and the step ends
// when the trust ratio comes back (on_trust).
void run_ready_steps(shard_ptr self, uint32_t job_id, shard_job& job, uint32_t tensor,
                     uint32_t chunk, detail::chunk_state& cs);

void run_steps(shard_ptr self, uint32_t job_id, shard_job& job, uint32_t tensor,
               uint32_t chunk, detail::chunk_state& cs) {
  run_ready_steps(self, job_id, job, tensor, chunk, cs);
  detail::check_settled(job, self->state.settings.index); // a moving job's chunks
}

void run_ready_steps(shard_ptr self, uint32_t job_id, shard_job& job, uint32_t tensor,
                     uint32_t chunk, detail::chunk_state& cs) {
  auto& st = self->state;
  while (cs.step_ready()) {
    if (!job.pending_hyper.empty() && cs.version() >= detail::held_from(job))
      return; // a hyper-parameter change for this clock is being agreed on: it decides
    if (job.mirror && !cs.summed() && job.routes->is_owned(tensor, chunk)) {
      auto node = job.routes->mirror_of(tensor, chunk);
      if (node != runtime::routing_table::not_here) {
        // The replica gets the step's sum first; its ack runs the step (on_mirrored).
        auto clock = cs.version();
        const float* sum = cs.prepare_mirror();
        job.mirror->send(st.settings.index, tensor, chunk, clock, job.ring_version, node, sum,
                         cs.length());
        return;
      }
    }
    if (job.relay) { // the rack's partial goes to the chunk's home; its answer ends the step
      auto clock = cs.version();
      job.relay->push(tensor, chunk, clock, cs.prepare_relay());
      return;
    }
    if (runtime::is_layerwise(job.spec.optimizer.kind)) {
      auto version = cs.version();
      auto parts = cs.prepare_layerwise(job.spec.optimizer, job.rescale);
      auto home = job.routes->shard_of(tensor, 0);
      self->send(caf::actor_cast<chunk_shard_actor>(job.peers[home]), norm_atom::value,
                 job_id, tensor, version, chunk, parts.w2, parts.d2);
      return;
    }
    if (st.answers.points_at(cs.params()))
      st.answers.flush(); // answers held point at the parameters this step changes
    {
      runtime::trace::scope traced{"step", "shard", {job_id, runtime::trace::about::none,
                                                     tensor, chunk, cs.version()}};
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

void on_norm(shard_ptr self, uint32_t job_id, uint32_t tensor, uint64_t version,
             uint32_t chunk, double w2, double d2) {
  auto it = self->state.book->jobs.find(job_id);
  if (it == self->state.book->jobs.end())
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
  std::vector<bool> told(job.peers.size(), false);
  for (uint32_t c = 0; c < count; ++c) {
    auto owner = job.routes->shard_of(tensor, c);
    if (told[owner])
      continue;
    told[owner] = true;
    self->send(caf::actor_cast<chunk_shard_actor>(job.peers[owner]), trust_atom::value,
               job_id, tensor, version, trust);
  }
}

void on_trust(shard_ptr self, uint32_t job_id, uint32_t tensor, uint64_t version,
              float trust) {
  auto it = self->state.book->jobs.find(job_id);
  if (it == self->state.book->jobs.end())
    return;
  auto& job = it->second;
  auto& layout = job.routes->layout(tensor);
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (job.routes->shard_of(tensor, c) != self->state.settings.index)
      continue;
    auto& cs = job.chunks[job.routes->local_index(tensor, c)];
    if (!cs.layerwise_pending() || cs.version() != version)
      continue;
    cs.finish_layerwise(job.spec.optimizer, trust, clock_type::now());
    count_step(self, job_id, job);
    if (detail::checkpoint_clock(job, cs.version()))
      send_periodic(self, job_id, job, cs.version(),
                    detail::checkpoint_reached(job, tensor, c, cs));
    answer_ready(self->state, job_id, job, tensor, c, cs);
    run_steps(self, job_id, job, tensor, c, cs); // pushes held for the next step
  }
}

// At a chunk's replica: its home's sum of step p.clock (actors/links/mirror_link), taken as the
// whole step, acked, and applied in order. Taken while the job settles or is frozen for
// a move too: the home's step waits for this ack, and a replica is rebuilt from its
// home's copy after a move anyway.
void on_mirror_push(shard_ptr self, chunk_push& p) {
  auto& st = self->state;
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
    p.conn->send_error(errc::bad_chunk,
                       fmt::format("chunk {}/{} holds {} bytes, the mirrored sum carries {}",
                                   p.tensor, p.chunk, cs.length() * sizeof(float),
                                   p.payload->size),
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
  hdr.flags = transports::flag_replica;
  if (st.answers.add_replica_ack(p.conn, hdr)) // behind the sums queued now: together
    self->send(self, flush_atom::value);
  if (result == detail::chunk_state::outcome::duplicate) {
    ++st.book->stats.duplicates;
    return;
  }
  run_steps(self, p.job_id, job, p.tensor, p.chunk, cs);
}

// At a chunk's home: its replica has the sum of step `clock`; the step runs.
void on_mirrored(shard_ptr self, uint32_t job_id, uint32_t tensor, uint32_t chunk,
                 uint64_t clock) {
  auto& st = self->state;
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

// Where a push of a chunk homed here waits for its answer: the new version (push_pull),
// or an ack; a replicated chunk's ack waits until its step is on the replica too. A
// repeat (`counted_before`) is answered at once if its answer is there.
void answer_push(shard_state& st, shard_job& job, chunk_push& p, detail::chunk_state& cs,
                 bool counted_before) {
  if (p.want_result || job.routes->mirror_of(p.tensor, p.chunk) != runtime::routing_table::not_here) {
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

// Runs `fn`, a handler that changes job `job_id`'s chunks, marked in the book: if the
// shard dies inside it, its successor knows that job's state may be half-changed.
template <class Fn>
void changing(shard_ptr self, uint32_t job_id, Fn fn) {
  auto& book = *self->state.book;
  book.changing = job_id;
  fn();
  book.changing.reset();
}

void on_push(shard_ptr self, chunk_push& p) {
  auto& st = self->state;
  if (p.rank == transports::mirror_rank) {
    on_mirror_push(self, p);
    return;
  }
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.clock);
  if (job == nullptr || detail::stale_ring(*job, p)
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::a_push, &p, nullptr))
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
                       fmt::format("chunk {}/{} holds {} bytes, push carries {}", p.tensor,
                                   p.chunk, cs.length() * sizeof(float), p.payload->size),
                       hdr);
    return;
  }
  if (job->settling && !detail::settling_admits(*job, p.tensor, cs, p.clock))
    return; // it would begin a step while the job moves: sent again after the reroute
  bool check_departed = job->departed_count > 0 && cs.push_needs_everyone(p.want_result);
  for (uint32_t r = 0; check_departed && r < job->departed.size(); ++r) {
    // (A rank's own push may be served after its leave: the backlog reorders.)
    if (r != p.rank && job->departed[r] && !cs.has_pushed(r, p.clock)) {
      p.conn->send_error(errc::worker_left,
                         fmt::format("job '{}': rank {} has left, clock {} cannot complete",
                                     job->spec.name, r, p.clock),
                         hdr);
      return;
    }
  }
  ++st.book->stats.pushes;
  auto bytes = p.payload->size;
  st.book->stats.bytes_in += bytes;
  auto result = [&] {
    runtime::trace::scope traced{"push", "shard", {p.job_id, p.rank, p.tensor, p.chunk, p.clock}};
    return cs.push(p.rank, p.clock, std::move(p.payload), clock_type::now());
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
    default:
      break;
  }
  cs.add_load(cs.length() + detail::push_load_overhead);
  if (p.rank < job->counters.size()) { // counted once accepted
    auto& counted = job->counters[p.rank];
    ++counted.pushes;
    counted.bytes_in += bytes;
    counted.clock = std::max(counted.clock, p.clock + 1);
  }
  answer_push(st, *job, p, cs, false);
  run_steps(self, p.job_id, *job, p.tensor, p.chunk, cs);
}

void on_init(shard_ptr self, chunk_push& p) {
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.clock);
  if (job == nullptr || detail::stale_ring(*job, p)
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::an_init, &p, nullptr))
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
      || p.payload->size != size_t{cs.length()} * sizeof(float) || !cs.init(p.payload->floats())) {
    if (!owned)
      return;
    p.conn->send_error(errc::bad_chunk,
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
  answer_ready(self->state, p.job_id, *job, p.tensor, p.chunk, cs);
}

// A hierarchical job's chunk, back from its home: the initial values (version 0, for
// racks whose workers had none to give) or the result of the step the rack's partial
// went into.
void on_relay(shard_ptr self, const relay_update& u) {
  auto it = self->state.book->jobs.find(u.job_id);
  if (it == self->state.book->jobs.end())
    return; // the job ended meanwhile
  auto& job = it->second;
  auto& cs = job.chunks[job.routes->local_index(u.tensor, u.chunk)];
  if (u.data == nullptr) {
    for (auto& w : cs.take_all())
      w.conn->send_error(u.code, u.why, about(u.job_id, w.rank, u.tensor, u.chunk, w.version));
    return;
  }
  if (u.version == 0) {
    cs.init(u.data); // rack 0 has them already: then this changes nothing
  } else if (cs.relay_pending() && u.version == cs.version() + 1) {
    cs.finish_relay(u.data, clock_type::now());
    count_step(self, u.job_id, job);
  } else {
    spdlog::warn("job {}: chunk {}/{} at version {} got version {} from its home; dropped",
                 u.job_id, u.tensor, u.chunk, cs.version(), u.version);
    return;
  }
  answer_ready(self->state, u.job_id, job, u.tensor, u.chunk, cs);
  run_steps(self, u.job_id, job, u.tensor, u.chunk, cs); // pushes held for the next step
}

void on_pull(shard_ptr self, chunk_pull& p) {
  auto* job = find_job(self, p.job_id, p.conn, p.rank, p.tensor, p.chunk, p.min_version);
  if (job == nullptr
      || stash_if_arriving(*job, p.tensor, p.chunk, shard_job::stashed::a_pull, nullptr, &p))
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
    answer_ready(self->state, p.job_id, *job, p.tensor, p.chunk, cs); // the current version
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
      hdr.flags = transports::flag_only_changed;
      p.conn->send(hdr);
      return;
    }
    cs.wait(waiting({p.conn, p.rank, p.min_version + 1}));
    answer_ready(self->state, p.job_id, *job, p.tensor, p.chunk, cs);
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
  answer_ready(self->state, p.job_id, *job, p.tensor, p.chunk, cs);
}

caf::result<ok_atom> create_job(shard_ptr self, job_setup& setup, abort_sink coordinator) {
  auto& st = self->state;
  shard_job job;
  try {
    job = detail::make_shard_job(setup, std::move(coordinator), st.settings.numa);
  } catch (const std::exception& e) {
    spdlog::error("shard {}: job {}: {}", st.settings.index, setup.job_id, e.what());
    return cluster_error(errc::invalid_spec, e.what());
  }
  if (st.settings.register_memory && job.memory->size() > 0) {
    try {
      job.memory_registration = st.settings.register_memory(job.memory->data(),
                                                            job.memory->size());
    } catch (const std::exception& e) { // its answers register on their first send
      spdlog::warn("shard {}: job {}: the parameter arena ({} bytes) was not registered "
                   "ahead: {}", st.settings.index, setup.job_id, job.memory->size(), e.what());
    }
  }
  st.book->memory_numa = job.memory_numa();
  st.book->stats.chunks += job.chunks.size();
  // A job that comes back (it moved away and a node join brought it here again) is
  // live: no older copy or tombstone answers for it.
  st.book->tombstones.erase(setup.job_id);
  auto& done = st.book->finished;
  done.erase(std::remove_if(done.begin(), done.end(),
                            [&](auto& f) { return f.id == setup.job_id; }),
             done.end());
  st.book->jobs.emplace(setup.job_id, std::move(job));
  return ok_atom::value;
}

// The pushes a move's first phase held, counted now (or dropped) as any other.
void serve_held(shard_ptr self, uint32_t job_id, shard_job& job) {
  job.holding = false;
  auto held = std::move(job.held);
  job.held.clear();
  detail::shard_answers::holding together{self->state.answers};
  for (auto& p : held)
    changing(self, job_id, [&] { on_push(self, p); });
}

// A job moves, first phase: its pushes here wait for the fence (chunk_shard.hpp, "hold").
caf::result<settle_targets> on_hold(shard_ptr self, uint32_t job_id) {
  auto& st = self->state;
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job,
                         fmt::format("shard {} has no live job {}", st.settings.index, job_id));
  auto& job = it->second;
  if (auto why = detail::cannot_settle(job); !why.empty())
    return cluster_error(errc::invalid_spec, why);
  job.holding = true;
  return detail::settle_reach(job, st.settings.index);
}

// Then its chunks here settle, then their copy (chunk_shard.hpp, "fence").
caf::result<chunk_snapshot> on_fence(shard_ptr self, uint32_t job_id,
                                     const settle_targets& targets) {
  auto& st = self->state;
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job,
                         fmt::format("shard {} has no live job {}", st.settings.index, job_id));
  auto& job = it->second;
  if (job.settle_rp)
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}' is moving already", job.spec.name));
  if (!job.holding)
    return cluster_error(errc::internal, fmt::format("job '{}': a fence came without its "
                                                     "hold first",
                                                     job.spec.name));
  auto rp = self->make_response_promise<chunk_snapshot>();
  job.settling = true;
  job.frozen = false;
  job.settle_rp = rp;
  job.settle_to = targets.by_tensor;
  serve_held(self, job_id, job);
  if (auto again = st.book->jobs.find(job_id); again != st.book->jobs.end())
    detail::check_settled(again->second, st.settings.index);
  return rp;
}

// The moved job's chunks here, from the copies (chunk_shard.hpp, "reshape").
caf::result<ok_atom> on_reshape(shard_ptr self, job_setup& setup) {
  auto& st = self->state;
  auto it = st.book->jobs.find(setup.job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("shard {} has no live job {}",
                                                        st.settings.index, setup.job_id));
  auto coordinator = it->second.coordinator;
  detail::fail_checkpoints(it->second, "the job moved between nodes before every chunk "
                                       "reached the checkpoint's clock");
  if (it->second.settle_rp)
    it->second.settle_rp->deliver(cluster_error(errc::stopped, "the job was reshaped"));
  st.book->stats.chunks -= it->second.chunks.size();
  st.book->jobs.erase(it); // waiters dropped unanswered: they are sent again
  return create_job(self, setup, std::move(coordinator));
}

// Steps whose sum waits for a replica's ack: sent again to the replica the job's routes
// name now, or, where they name none (a takeover leaves the job without replicas), run
// at once.
void remirror(shard_ptr self, uint32_t job_id, shard_job& job) {
  auto& st = self->state;
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
caf::result<ok_atom> on_takeover(shard_ptr self, route_change& rc) {
  auto& st = self->state;
  auto it = st.book->jobs.find(rc.job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("shard {} has no live job {}",
                                                        st.settings.index, rc.job_id));
  size_t released = 0;
  if (auto why = detail::retarget(it->second, st.settings.index, rc, released); !why.empty())
    return cluster_error(errc::internal, why);
  st.book->stats.chunks -= released;
  remirror(self, rc.job_id, it->second);
  return ok_atom::value;
}

// A checkpoint of a job this shard holds, live or finished.
caf::result<chunk_snapshot> on_checkpoint(shard_ptr self, uint32_t job_id, uint64_t clock) {
  auto& st = self->state;
  shard_job* job = nullptr;
  if (auto it = st.book->jobs.find(job_id); it != st.book->jobs.end())
    job = &it->second;
  for (auto& kept : st.book->finished)
    if (kept.id == job_id)
      job = &kept.job;
  if (job == nullptr) {
    auto t = st.book->tombstones.find(job_id);
    return cluster_error(errc::unknown_job,
                         t == st.book->tombstones.end()
                           ? fmt::format("shard {} has no job {}", st.settings.index, job_id)
                           : fmt::format("job {} is gone: {}", job_id, t->second.why));
  }
  auto p = detail::start_checkpoint(*job, clock, [&](auto fn) {
    for_each_own_chunk(st, *job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
      return !job->routes->is_owned(t, c) || fn(t, c, cs); // replicas: their home's copy
    });
  });
  if (!p.error.empty())
    return cluster_error(errc::invalid_spec, p.error);
  if (p.remaining == 0)
    return p.taken;
  p.rp = self->make_response_promise<chunk_snapshot>();
  auto rp = p.rp;
  job->checkpoints.push_back(std::move(p));
  return rp;
}

void scan_timeouts(shard_ptr self) {
  auto& st = self->state;
  auto now = clock_type::now();
  for (auto& [job_id, job] : st.book->jobs) {
    if (job.timed_out)
      continue;
    for_each_own_chunk(st, job, [&, id = job_id, &job = job](uint32_t t, uint32_t c,
                                                           detail::chunk_state& cs) {
      if (!cs.step_open() || now - cs.opened_at() < st.settings.step_timeout)
        return true;
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - cs.opened_at());
      auto why = fmt::format("job '{}' (id {}): step {} of chunk {}/{} waited {} ms for "
                             "ranks [{}]; the step timeout is {} ms",
                             job.spec.name, id, cs.version(), t, c, waited.count(),
                             fmt::join(cs.missing_ranks(), ", "),
                             st.settings.step_timeout.count());
      job.timed_out = true;
      self->send(job.coordinator, abort_atom::value, id, errc::step_timeout, why);
      return false;
    });
  }
}

// In-node balancing, step 1 (actors/shard/balance.hpp): the chunks the move gives this
// shard wait for their state.
caf::result<ok_atom> on_expect(shard_ptr self, const shard_move& m) {
  auto& st = self->state;
  auto it = st.book->jobs.find(m.job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("shard {} has no live job {}",
                                                        st.settings.index, m.job_id));
  if (auto why = detail::expect_chunks(it->second, st.settings.index, m.next); !why.empty())
    return cluster_error(errc::invalid_spec, fmt::format("job {}: shard {}: {}", m.job_id,
                                                         st.settings.index, why));
  auto& incoming = it->second.incoming; // counted from now: a drop counts them out
  st.book->stats.chunks +=
    static_cast<uint64_t>(std::count(incoming.begin(), incoming.end(), true));
  return ok_atom::value;
}

// Step 3: the chunks the move takes from this shard go to `to`, whose answer ends it.
caf::result<ok_atom> on_migrate(shard_ptr self, const shard_move& m, const caf::actor& to) {
  auto& st = self->state;
  auto it = st.book->jobs.find(m.job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("shard {} has no live job {}",
                                                        st.settings.index, m.job_id));
  auto& job = it->second;
  if (!job.incoming.empty())
    return cluster_error(errc::internal, fmt::format("job {}: shard {} is receiving chunks "
                                                     "itself",
                                                     m.job_id, st.settings.index));
  st.answers.flush(); // nothing held may point at a chunk once another shard runs it
  auto h = std::make_shared<detail::chunk_handoff>();
  changing(self, m.job_id, [&] {
    *h = detail::give_chunks(*st.book, m.job_id, job, st.settings.index, m.next);
  });
  st.book->stats.chunks -= h->chunks.size();
  st.book->stats.moved_out += h->chunks.size();
  for (auto& [clock, snap] : detail::take_complete_periodic(job))
    send_periodic(self, m.job_id, job, clock, std::move(snap));
  return self->delegate(caf::actor_cast<chunk_shard_actor>(to), adopt_atom::value, h);
}

// The chunks arrive: they take their places, and what waited for them is served.
caf::result<ok_atom> on_adopt(shard_ptr self, const handoff_ptr& h) {
  auto& st = self->state;
  auto it = st.book->jobs.find(h->job_id);
  if (it == st.book->jobs.end())
    return cluster_error(errc::unknown_job, fmt::format("shard {} has no live job {}",
                                                        st.settings.index, h->job_id));
  auto& job = it->second;
  std::string error;
  std::vector<shard_job::stashed> serve;
  changing(self, h->job_id, [&] { serve = detail::take_chunks(job, *h, error); });
  if (!error.empty() && serve.empty())
    return cluster_error(errc::internal, fmt::format("job {}: shard {}: {}", h->job_id,
                                                     st.settings.index, error));
  st.book->stats.moved_in += h->chunks.size();
  for (auto& [clock, snap] : detail::take_complete_periodic(job))
    send_periodic(self, h->job_id, job, clock, std::move(snap));
  detail::shard_answers::holding together{st.answers};
  for (auto& r : serve) {
    switch (r.kind) {
      case shard_job::stashed::a_push:
        changing(self, r.push.job_id, [&] { on_push(self, r.push); });
        break;
      case shard_job::stashed::an_init:
        changing(self, r.push.job_id, [&] { on_init(self, r.push); });
        break;
      case shard_job::stashed::a_pull:
        on_pull(self, r.pull);
        break;
    }
  }
  if (!error.empty())
    return cluster_error(errc::internal, fmt::format("job {}: shard {}: {}", h->job_id,
                                                     st.settings.index, error));
  return ok_atom::value;
}

// Finished jobs kept past their time are released: their arena goes back to the system
// and a checkpoint of them is refused saying so (the tombstone's reason).
void release_finished(shard_state& st) {
  auto now = std::chrono::steady_clock::now();
  auto& done = st.book->finished;
  while (!done.empty() && done.front().release_at <= now) {
    auto id = done.front().id;
    done.pop_front();
    if (auto t = st.book->tombstones.find(id); t != st.book->tombstones.end())
      t->second.why += fmt::format("; its chunks were released {} ms after it ended "
                                   "(--keep-finished-ms)",
                                   st.settings.keep_finished.count());
  }
}

// A job leaves the shard (it finished, or moved to other nodes): its chunks are kept a
// while for a checkpoint; frames for it are answered by `code` and `why`.
void drop_job(shard_ptr self, uint32_t job_id, errc code, const std::string& why) {
  auto it = self->state.book->jobs.find(job_id);
  if (it == self->state.book->jobs.end())
    return;
  auto& st = self->state;
  st.book->stats.chunks -= it->second.chunks.size();
  auto job = std::move(it->second);
  bury(st, job_id, code, why);
  detail::fail_checkpoints(job, "the job finished before every chunk reached it");
  if (st.settings.keep_finished.count() > 0)
    st.book->finished.push_back({job_id, std::move(job),
                                 std::chrono::steady_clock::now() + st.settings.keep_finished});
  while (st.book->finished.size() > defaults::kept_finished_jobs)
    st.book->finished.pop_front();
}

// Why job `job` cannot go on after its shard died (its state may be lost), or "".
std::string lost_state(const shard_state& st, uint32_t job_id, shard_job& job) {
  if (st.book->changing == job_id)
    return "the shard died while changing the job's chunks";
  if (!job.incoming.empty())
    return "chunks moving here from another shard of the node (balancing) may have died "
           "in the shard's mailbox";
  if (runtime::is_layerwise(job.spec.optimizer.kind) && !job.chunks.empty())
    return "a layer-wise optimizer's norm and trust messages between shards may have "
           "died in the shard's mailbox";
  bool waiting = false;
  if (job.relay)
    for_each_own_chunk(st, job, [&](uint32_t t, uint32_t, detail::chunk_state& cs) {
      waiting = cs.relay_pending()
                || (!cs.initialized() && job.spec.tensors[t].has_init); // its init comes from home
      return !waiting;
    });
  if (waiting)
    return "a step of the rack's part waited for its home's answer, which may have died "
           "in the shard's mailbox";
  return {};
}

// A shard that takes over a book its predecessor held (it died): the jobs whose state
// is whole go on, the others fail; pushes its predecessor had queued are served.
void adopt(shard_ptr self) {
  auto& st = self->state;
  auto& book = *st.book;
  std::vector<uint32_t> kept;
  std::vector<std::pair<uint32_t, std::string>> lost;
  for (auto& [id, job] : book.jobs) {
    // Checkpoint promises of the dead shard cannot be kept by this one: dropped; the
    // node's coordinator fails those checkpoints when it learns of the restart.
    job.checkpoints.clear();
    job.settle_rp.reset(); // the node's coordinator gives the move up when it times out
    auto why = lost_state(st, id, job);
    if (why.empty())
      kept.push_back(id);
    else
      lost.emplace_back(id, std::move(why));
  }
  for (auto& [id, why] : lost) {
    auto& job = book.jobs.at(id);
    auto reason = fmt::format("job '{}' (id {}): shard {} crashed and was restarted, but {}",
                              job.spec.name, id, st.settings.index, why);
    self->send(job.coordinator, abort_atom::value, id, errc::internal, reason);
    fail_job(st, id, errc::internal, reason);
  }
  book.changing.reset();
  for (auto& id : kept) // acks of mirrored sums may have died in the mailbox
    remirror(self, id, book.jobs.at(id));
  for (size_t i = 0; i < book.backlog.size(); ++i)
    self->send(self, work_atom::value);
  spdlog::warn("shard {} (restart {}) took over its predecessor's chunks: jobs [{}] go "
               "on; {} job(s) failed; {} queued pushes to serve",
               st.settings.index, book.incarnation - 1, fmt::join(kept, ","), lost.size(),
               book.backlog.size());
}

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
      if (!st.settings.priority || (st.book->backlog.empty() && self->mailbox().empty())) {
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
        std::stable_sort(batch.begin(), batch.end(),
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
    [=](init_atom, chunk_push& p) { changing(self, p.job_id, [&] { on_init(self, p); }); },
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
      spdlog::warn("shard {}: crashing on purpose in 50 ms ({})", self->state.settings.index,
                   why);
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
      return it == self->state.book->jobs.end() ? 0 : detail::prepare_hyper(it->second, id, change);
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
      drop_job(self, job_id, errc::unknown_job, "the job finished: every worker said bye");
    },
    [=](drop_atom, uint32_t job_id, errc code, const std::string& why) {
      drop_job(self, job_id, code, why);
    },    [=](norm_atom, uint32_t job_id, uint32_t tensor, uint64_t version, uint32_t chunk,
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

} // namespace

std::shared_ptr<detail::shard_book> make_shard_book() {
  return std::make_shared<detail::shard_book>();
}

chunk_shard_actor spawn_chunk_shard(caf::actor_system& sys, shard_settings settings,
                                    std::shared_ptr<detail::shard_book> book) {
  return sys.spawn<caf::detached>(shard_behavior, settings,
                                  book ? std::move(book) : make_shard_book());
}

} // namespace rw::actors
