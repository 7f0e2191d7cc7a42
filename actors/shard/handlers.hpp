#pragma once
// The chunk shard's handlers, shared by the files that hold them, one concept each:
//   handle_steps.cpp   a chunk's step: answers, running ready steps, layer-wise norms
//   handle_push.cpp    the data path: pushes, inits, pulls
//   handle_state.cpp   a chunk's optimizer state, read or loaded (state frames)
//   handle_mirror.cpp  replicas and relays: mirrored sums, a rack's part, takeovers
//   handle_life.cpp    a job's life here: creation, failure, timeouts, checkpoints,
//                      finished jobs, a successor adopting the book
//   handle_moves.cpp   moving chunks: a drain's hold, fence and reshape; in-node balancing
// core.cpp is shard_core's calls, which lead here. Each handler works on the
// shard_core it is given: its state (the book, job.hpp) and its outbox (outbox.hpp).
// No actor here: the chunk_shard actor (chunk_shard.cpp) drives shard_core.

#include <chrono>
#include <string>
#include <vector>

#include "actors/shard/core.hpp"
#include "actors/shard/job.hpp"
#include "logic/chunk_state.hpp"
#include "logic/shard_answers.hpp"
#include "protocol/frame.hpp"

namespace rw::actors::shard_impl {

using clock_type = std::chrono::steady_clock;
using protocol::frame_header;
using protocol::frame_kind;

constexpr size_t max_tombstones = 256;
// Backlog pushes served per work token: enough that their answers share system calls,
// few enough that a push arriving meanwhile with a lower clock waits little.
constexpr int max_served_per_work = 32;

using detail::shard_book;
using detail::shard_job;
using shard_state = shard_core::shared_state;

// handle_steps.cpp: a chunk's step
frame_header about(uint32_t job, uint32_t rank, uint32_t tensor, uint32_t chunk,
                   uint64_t clock);
void send_update(shard_state& st, uint32_t job_id, shard_job& job, uint32_t tensor,
                 uint32_t chunk, const detail::chunk_state& cs, const detail::waiter& w,
                 uint16_t flags = 0);
void answer_ready(shard_state& st, uint32_t job_id, shard_job& job, uint32_t tensor,
                  uint32_t chunk, detail::chunk_state& cs);
detail::waiter waiting(detail::waiter w);
bool stash_if_arriving(shard_job& job, uint32_t tensor, uint32_t chunk,
                       shard_job::stashed::kind_t kind, chunk_push* push,
                       chunk_pull* pull);
void send_periodic(shard_core& self, uint32_t job_id, shard_job& job, uint64_t clock,
                   chunk_snapshot snap);
void count_step(shard_core& self, uint32_t job_id, shard_job& job);
void run_steps(shard_core& self, uint32_t job_id, shard_job& job, uint32_t tensor,
               uint32_t chunk, detail::chunk_state& cs);
void run_ready_steps(shard_core& self, uint32_t job_id, shard_job& job, uint32_t tensor,
                     uint32_t chunk, detail::chunk_state& cs);
void on_norm(shard_core& self, uint32_t job_id, uint32_t tensor, uint64_t version,
             uint32_t chunk, double w2, double d2);
void on_trust(shard_core& self, uint32_t job_id, uint32_t tensor, uint64_t version,
              float trust);
void answer_push(shard_state& st, shard_job& job, chunk_push& p, detail::chunk_state& cs,
                 bool counted_before);

// handle_push.cpp: the data path
void on_push(shard_core& self, chunk_push& p);
void on_init(shard_core& self, chunk_push& p);
void on_pull(shard_core& self, chunk_pull& p);

// handle_state.cpp: a chunk's optimizer state
void on_state(shard_core& self, state_request& r);

// handle_mirror.cpp: replicas and relays
void replica_ack(const transports::connection_ptr& conn, frame_header hdr);
void on_mirror_push(shard_core& self, chunk_push& p);
void on_mirrored(shard_core& self, uint32_t job_id, uint32_t tensor, uint32_t chunk,
                 uint64_t clock);
void on_relay(shard_core& self, const relay_update& u);
void remirror(shard_core& self, uint32_t job_id, shard_job& job);
shard_refusal on_takeover(shard_core& self, route_change& rc);

// handle_life.cpp: a job's life
void refuse_missing_job(const shard_state& st, const transports::connection_ptr& conn,
                        const frame_header& about);
void bury(shard_state& st, uint32_t job_id, errc code, std::string why);
void fail_job(shard_state& st, uint32_t job_id, errc code, const std::string& why);
void fail_steps_needing(shard_state& st, uint32_t job_id, shard_job& job, uint32_t rank,
                        const std::string& why);
shard_job* find_job(shard_core& self, uint32_t job_id,
                    const transports::connection_ptr& conn, uint32_t rank,
                    uint32_t tensor, uint32_t chunk, uint64_t clock);
/// The same, refusing a missing job with `request`'s fields (a state call's tag in
/// `ring`, so that the worker's call ends at once rather than at its timeout).
shard_job* find_job(shard_core& self, const transports::connection_ptr& conn,
                    const frame_header& request);
shard_refusal create_job(shard_core& self, job_setup& setup,
                         std::shared_ptr<job_reports> coordinator);
void on_checkpoint(shard_core& self, uint32_t job_id, uint64_t clock,
                   snapshot_reply_ptr reply);
void scan_timeouts(shard_core& self);
void release_finished(shard_state& st);
void drop_job(shard_core& self, uint32_t job_id, errc code, const std::string& why);
std::string lost_state(const shard_state& st, uint32_t job_id, shard_job& job);
void adopt(shard_core& self);
shard_refusal no_live_job(const shard_state& st, uint32_t job_id);

// handle_moves.cpp: moving chunks
void serve_held(shard_core& self, uint32_t job_id, shard_job& job);
shard_refusal on_hold(shard_core& self, uint32_t job_id, settle_targets& reach);
void on_fence(shard_core& self, uint32_t job_id, const settle_targets& targets,
              snapshot_reply_ptr reply);
shard_refusal on_reshape(shard_core& self, job_setup& setup);
shard_refusal on_expect(shard_core& self, const shard_move& m);
shard_refusal on_migrate(shard_core& self, const shard_move& m, handoff_ptr& handoff);
shard_refusal on_adopt(shard_core& self, const handoff_ptr& h);

// Calls fn(tensor, chunk, state) for every chunk of `job` this shard owns, until fn
// returns false (not those whose state is still on its way from another shard).
template <class Fn>
void for_each_own_chunk(const shard_state& st, shard_job& job, Fn fn) {
  detail::for_each_chunk(job, st.settings.index,
                         [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
                           return job.awaits(t, c) || fn(t, c, cs);
                         });
}

// Runs `fn`, a handler that changes job `job_id`'s chunks, marked in the book: if the
// shard dies inside it, its successor knows that job's state may be half-changed.
template <class Fn>
void changing(shard_core& self, uint32_t job_id, Fn fn) {
  auto& book = *self.state.book;
  book.changing = job_id;
  fn();
  book.changing.reset();
}

} // namespace rw::actors::shard_impl
