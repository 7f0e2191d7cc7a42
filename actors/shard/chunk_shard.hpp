#pragma once
// Chunk shard: owns a set of chunks (parameters, optimizer state, the step in progress)
// on one core, for every job on the node. "Tall" aggregation: one shard sums one
// chunk across all workers, runs the optimizer on it while it is hot, and answers.
//
// Protocol
//   poller      -> shard  (push_atom, chunk_push)
//                         a gradient for (job, tensor, chunk, clock). A push of a
//                         (rank, tensor, chunk, clock) already counted (a restarted
//                         worker's, or a re-send) is dropped and answered as the first
//                         was: an ack, or the update. Summed in rank
//                         order; when every rank is in, the optimizer step runs and an
//                         `update` frame goes to every worker waiting for the new
//                         version (eager: push_pull needs no second request). A push
//                         without want_result is answered with an `ack` frame.
//                         With priority on, pushes first wait in the shard's backlog:
//                         each (work_atom) the shard sends itself takes the backlog's
//                         lowest clocks (a few), so when pushes queue the worker furthest
//                         behind is served first. Answers made while one message serves
//                         many chunks (a batch, the backlog, a replica's acks) go out
//                         when it ends, each worker's in one gather write
//                         (logic/shard_answers).
//   poller      -> shard  (push_atom, [chunk_push])  the pushes a poller read in one
//                         round, in the order read: served as that many pushes (with
//                         priority on, lowest clock first; behind the backlog if one waits)
//   poller      -> shard  (init_atom, chunk_push)   rank 0's initial values (version 0)
//   poller      -> shard  (pull_atom, chunk_pull)   answered with an `update` frame as
//                         soon as the chunk's version reaches min_version
//   poller      -> shard  (state_atom, state_request)  a chunk's optimizer state (BSP,
//                         between steps): one array read, answered with a `state`
//                         frame; or rank 0 loads one, or sets the version, into a chunk
//                         at version 0 (actors/shard/handle_state.cpp)
//   coordinator -> shard  (create_atom, job_setup) -> ok_atom
//                         allocate this shard's chunks of a new job
//   coordinator -> shard  (leave_atom, job_id, rank, reason)
//                         a worker said bye: steps that still need it fail
//   coordinator -> shard  (rejoin_atom, job_id, rank)
//                         a worker that said bye joined again: steps may need it again
//   coordinator -> shard  (resume_atom, job_id, rank) -> uint64_t
//                         the lowest clock of the rank's pushes that a chunk here has not
//                         counted (UINT64_MAX: no chunk of the job here): where a worker
//                         that joins, or joins again after a crash, goes on from
//   coordinator -> shard  (abort_atom, job_id, errc, reason)
//                         fail every waiter of the job and drop it
//   coordinator -> shard  (drop_atom, job_id)       the job finished: its chunks stop
//                         serving; the newest defaults::kept_finished_jobs finished jobs'
//                         chunks are kept for a checkpoint, older ones released, and
//                         each is released `keep_finished` after it finished
//   coordinator -> shard  (drop_atom, job_id, errc::moved, why)  the job moved to other
//                         nodes: dropped as above, and frames for it that come late
//                         (routed by the ring it left) are dropped unanswered, as the
//                         worker sends them again by its new ring
//   coordinator -> shard  (ckpt_atom, job_id, clock) -> chunk_snapshot
//                         a copy of each of the job's chunks here at version `clock`,
//                         taken right after its step to `clock` completes (at once if
//                         it is there; actors/shard/checkpoint.hpp), or of every chunk
//                         as it stands (clock UINT64_MAX); an error if a chunk is past
//                         the clock, or the job ends first
//   coordinator -> shard  (crash_atom, why)   fault injection: the shard stalls 50 ms
//                         (requests queue in its mailbox), then throws, as a bug would,
//                         between two messages; it dies and is restarted
//   coordinator -> shard  (hold_atom, job_id) -> settle_targets
//                         a BSP job moves (a node drained), first phase: its pushes
//                         here wait, uncounted, for the fence; the answer is how far
//                         each tensor of a layer-wise job got on this shard
//                         (chunk_state::settle_reach), for the coordinator to take the
//                         highest over the node's shards
//   coordinator -> shard  (fence_atom, job_id, settle_targets) -> chunk_snapshot
//                         second phase: its chunks here settle, the pushes held first.
//                         A push is still counted only if it finishes what was begun:
//                         for a layer-wise job's tensor, a step below the tensor's
//                         target (every chunk of a tensor settles at one version: its
//                         step needs them all); for any other chunk, a step some rank
//                         is in or a held next step. Any other is dropped unanswered
//                         (the worker sends it again after the reroute). Once every
//                         chunk has no step in it, the answer is a copy of each
//                         (parameters, optimizer state, version) and the job is
//                         frozen: every request for it is dropped unanswered
//   coordinator -> shard  (reshape_atom, job_setup) -> ok_atom
//                         the job's chunks here become those of the new routes, from
//                         setup.restore (the copies, kept or moved here); its waiters
//                         are dropped unanswered (they are sent again); it serves again
//   coordinator -> shard  (takeover_atom, route_change) -> ok_atom
//                         a node of the job died: the job goes on by `routes` (the ring
//                         without it), where every chunk this shard serves it served
//                         before (as home or replica) on the same shard: the chunks keep
//                         their state (a home keeps its step in progress; a step whose sum
//                         waited for a replica the new routes do not name runs now, or
//                         goes to the replica they name); a replica that is now the home
//                         answers from now on (its workers send again what is
//                         unanswered); the ones no longer served here are dropped
//   coordinator -> shard  (thaw_atom, job_id)   the move was given up: it serves again
//                         as it stood, the pushes held first (requests dropped
//                         meanwhile are sent again)
//   coordinator -> shard  (hyper_atom, job_id, id, hyper_change) -> highest version
//                         prepares a hyper-parameter change: the job's steps of clocks
//                         >= its at_clock wait here until (hyper_atom, job_id, id, apply)
//                         commits it into the schedule (apply) or drops it; then they run
//                         (actors/shard/hyper.hpp)
//   anyone      -> shard  (stats_atom) -> shard_stats
//   coordinator -> shard  (stats_atom, job_id) -> job_counters
//                         per rank of the job: pushes, pulls, bytes, wait, clock (empty
//                         if the shard holds none of the job's chunks)
//   shard -> coordinator  (ckpt_atom, job_id, clock, chunk_snapshot)
//                         a job with periodic checkpoints (checkpoint_every N): every
//                         chunk of the job here, copied right after its step to clock
//                         (a multiple of N), once the last of them has reached it
//   shard -> coordinator  (abort_atom, job_id, errc, reason)
//                         a step waited longer than the step timeout
//   shard -> coordinator  (step_atom, job_id, shard index, clock)
//                         the job's chunks here have completed `clock` steps (their
//                         completed steps summed, over their count: in BSP the lowest
//                         chunk's version); sent once per clock, for step times
//   shard -> home shard   (norm_atom, job_id, tensor, version, chunk, w2, d2)
//                         LAMB / LARS: a chunk's step is prepared; its share of the
//                         tensor's norms goes to the shard owning the tensor's chunk 0
//   home shard -> shards  (trust_atom, job_id, tensor, version, trust)
//                         every chunk of the tensor is in: apply with this ratio
//   uplink      -> shard  (relay_atom, relay_update)
//                         hierarchical jobs: a rack job's step does not run the
//                         optimizer; the rack's partial sum (its workers' gradients in
//                         rank order) goes to the uplink (actors/links/rack_uplink), and the
//                         chunk's new parameters from its home end the step here, as
//                         the next version; the initial values of version 0 come the
//                         same way to racks whose workers do not send them
//   mirror link -> shard (mirror_atom, job_id, [tensor, chunk, clock]...)
//                         replicas = 1: each chunk's replica has the sum of its step
//                         `clock` (actors/links/mirror_link); those steps run, from their sums
//   poller      -> shard  (push_atom, chunk_push) of rank protocol::mirror_rank: at a
//                         chunk's replica, its home's sum of a step, taken as the whole
//                         step (its optimizer step runs on it) and acked (flag_replica);
//                         a repeat is acked again and dropped. The acks wait for the
//   shard       -> itself (flush_atom): sent behind the mirrored sums queued with the
//                         first; then the acks of all taken since go out, one system
//                         call per connection (an ack lost with a crashed shard: the
//                         home's link sends the sum again a second later)
//   shard       -> itself (held_atom): only on a node started with --test-delay-answers
//                         (a test hook): the updates held back that are due go out
//   coordinator -> shard  (plan_atom, share) -> balance_plan
//                         in-node balancing (actors/shard/balance.hpp): the chunks of one
//                         movable job it would give another shard, heaviest by the load
//                         they gave it since its last plan, at most `share` of its load
//   coordinator -> shard  (expect_atom, shard_move) -> ok_atom
//                         the job's chunks `move.next` gives this shard: their places
//                         wait for their state; requests for them meanwhile are stashed
//   coordinator -> shard  (migrate_atom, shard_move, new shard) -> ok_atom
//                         the chunks `move.next` takes from this shard go, state, backlog
//                         and all, to the new shard (adopt), whose answer this is
//   shard       -> shard  (adopt_atom, chunk_handoff) -> ok_atom
//                         they take their places; then the requests stashed for them
// Failures reach the worker concerned as `error` frames; the shard keeps serving.
//
// Restart: a shard's jobs, chunks (parameters, optimizer state, versions, the step in
// progress: partial sums, arrivals, waiters, subscribers), backlog and counters live in
// its book, which its NUMA supervisor holds as well. When the shard dies, the
// supervisor spawns its successor on the same core with the same book, and tells the
// node's pollers and coordinator the new handle (replace_atom). What dies with the
// shard is its mailbox: the pollers therefore send each worker a `resend` frame
// naming the shard, and workers re-send every request still unanswered for chunks it
// serves (repeated pushes are dropped, repeated answers ignored). A job goes on unless
// its state may truly be lost: a handler was changing its chunks when the shard died;
// it is layer-wise (LAMB, LARS: norm and trust messages between shards may have died
// in the mailbox); or it is a hierarchical rack part with a step waiting for its
// home's answer here. Those jobs fail with that reason (to the coordinator, abort_atom).
// Checkpoints the dead shard was to answer are dropped here (its promises cannot be
// kept by another actor); the node's coordinator fails them when it learns of the
// restart (replace_atom).

#include <chrono>
#include <memory>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/messages.hpp"
#include "actors/shard/settings.hpp"

namespace rw::actors {

namespace detail {
struct shard_book;
} // namespace detail

/// The part of the coordinator's interface a shard reports to.
using abort_sink =
  caf::typed_actor<caf::reacts_to<abort_atom, uint32_t, errc, std::string>,
                   caf::reacts_to<ckpt_atom, uint32_t, uint64_t, chunk_snapshot>,
                   caf::reacts_to<step_atom, uint32_t, uint32_t, uint64_t>>;

using chunk_shard_actor = caf::typed_actor<
  caf::reacts_to<push_atom, chunk_push>,
  caf::reacts_to<push_atom, std::vector<chunk_push>>,
  caf::reacts_to<init_atom, chunk_push>, caf::reacts_to<relay_atom, relay_update>,
  caf::reacts_to<mirror_atom, uint32_t, std::vector<uint64_t>>,
  caf::reacts_to<pull_atom, chunk_pull>, caf::reacts_to<state_atom, state_request>,
  caf::replies_to<create_atom, job_setup, abort_sink>::with<ok_atom>,
  caf::reacts_to<leave_atom, uint32_t, uint32_t, std::string>,
  caf::reacts_to<rejoin_atom, uint32_t, uint32_t>,
  caf::reacts_to<crash_atom, std::string>,
  caf::replies_to<resume_atom, uint32_t, uint32_t>::with<uint64_t>,
  caf::reacts_to<abort_atom, uint32_t, errc, std::string>,
  caf::reacts_to<drop_atom, uint32_t>,
  caf::reacts_to<drop_atom, uint32_t, errc, std::string>, caf::reacts_to<tick_atom>,
  caf::reacts_to<held_atom>, caf::reacts_to<work_atom>, caf::reacts_to<flush_atom>,
  caf::reacts_to<norm_atom, uint32_t, uint32_t, uint64_t, uint32_t, double, double>,
  caf::reacts_to<trust_atom, uint32_t, uint32_t, uint64_t, float>,
  caf::replies_to<ckpt_atom, uint32_t, uint64_t>::with<chunk_snapshot>,
  caf::replies_to<hold_atom, uint32_t>::with<settle_targets>,
  caf::replies_to<fence_atom, uint32_t, settle_targets>::with<chunk_snapshot>,
  caf::replies_to<reshape_atom, job_setup>::with<ok_atom>,
  caf::reacts_to<thaw_atom, uint32_t>,
  caf::replies_to<hyper_atom, uint32_t, uint64_t, hyper_change>::with<uint64_t>,
  caf::reacts_to<hyper_atom, uint32_t, uint64_t, bool>,
  caf::replies_to<takeover_atom, route_change>::with<ok_atom>,
  caf::replies_to<plan_atom, double>::with<balance_plan>,
  caf::replies_to<expect_atom, shard_move>::with<ok_atom>,
  caf::replies_to<migrate_atom, shard_move, caf::actor>::with<ok_atom>,
  caf::replies_to<adopt_atom, handoff_ptr>::with<ok_atom>,
  caf::replies_to<stats_atom>::with<shard_stats>,
  caf::replies_to<stats_atom, uint32_t>::with<job_counters>>;

/// A new, empty shard book (actors/shard/job.hpp): what a shard holds, kept by its
/// supervisor too so a restarted shard goes on with it.
std::shared_ptr<detail::shard_book> make_shard_book();

/// The node's shards, by index, as a job's shards see them (a layer-wise step's norms
/// and trust ratios go to them as messages).
std::shared_ptr<const shard_peers> make_shard_peers(
  const std::vector<chunk_shard_actor>& shards);

/// Spawns a shard as a detached actor (its own thread), which pins itself to
/// settings.core first; if that fails it exits with the reason (ask it for stats to
/// know it is up). It keeps its state in `book`; a book that a shard before it held
/// (it died) is adopted: see "Restart" above. Its logic is shard_core (core.hpp).

chunk_shard_actor spawn_chunk_shard(caf::actor_system& sys, shard_settings settings,
                                    std::shared_ptr<detail::shard_book> book);

} // namespace rw::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::handoff_ptr)
