#pragma once
// The chunk shard's logic as a plain class, with no actor in it: the jobs and chunks
// it holds (its book, actors/shard/job.hpp), each request of its protocol
// (actors/shard/chunk_shard.hpp, "Protocol") as a call, and what it sends out through
// the interfaces of actors/shard/outbox.hpp. The chunk_shard actor (chunk_shard.cpp)
// turns each message into a call and each call on an interface into a message; tests
// drive it directly (tests/unit/test_shard_core.cpp).
//
// The calls' bodies live in files by concept (handlers.hpp lists them): the data path
// (handle_push.cpp), a chunk's step (handle_steps.cpp), replicas and relays
// (handle_mirror.cpp), a job's life (handle_life.cpp), moving chunks
// (handle_moves.cpp); the rest, with the backlog, in core.cpp.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/shard/balance.hpp"
#include "actors/shard/job.hpp"
#include "actors/shard/outbox.hpp"
#include "actors/shard/requests.hpp"
#include "actors/shard/settings.hpp"
#include "logic/held_answers.hpp"
#include "logic/shard_answers.hpp"

namespace rw::actors {

/// A request the shard refused, with the code and reason its asker is answered with
/// (code errc::ok: it was not refused).
struct shard_refusal {
  errc code = errc::ok;
  std::string why;
  explicit operator bool() const { return code != errc::ok; }
};

class shard_core {
public:
  /// A shard on `settings`, keeping its state in `book`; `out` is its own mailbox.
  shard_core(shard_settings settings, std::shared_ptr<detail::shard_book> book,
             shard_outbox& out);
  /// Its first act, once `out` takes messages: a book that a shard before it held (it
  /// died) is taken over (chunk_shard.hpp, "Restart").
  void start();

  // --- the data path -------------------------------------------------------------
  /// A push: served now, or (priority on, other requests waiting) queued in the
  /// backlog behind a work token.
  void push(chunk_push& p);
  /// The pushes a poller read in one round, in the order read.
  void push(std::vector<chunk_push>& batch);
  /// A work token: the backlog's lowest clocks, a few, their answers sent together.
  void work();
  /// A flush token: the acks of the mirrored sums taken since the first.
  void flush();
  void init(chunk_push& p);
  void pull(chunk_pull& p);
  /// A chunk's optimizer state, read or loaded (handle_state.cpp).
  void state_of(state_request& r);
  void relay(const relay_update& u);
  /// Replicas have the sums of steps (tensor, chunk, clock, ...) of job `job_id`.
  void mirrored(uint32_t job_id, const std::vector<uint64_t>& acked);
  void norm(uint32_t job_id, uint32_t tensor, uint64_t version, uint32_t chunk, double w2,
            double d2);
  void trust(uint32_t job_id, uint32_t tensor, uint64_t version, float trust);

  // --- a job's life ----------------------------------------------------------------
  shard_refusal create(job_setup& setup, std::shared_ptr<job_reports> coordinator);
  /// A copy of each of the job's chunks here at `clock`, now or once they reach it,
  /// through `reply` (or its failure).
  void checkpoint(uint32_t job_id, uint64_t clock, snapshot_reply_ptr reply);
  void leave(uint32_t job_id, uint32_t rank, const std::string& why);
  void rejoin(uint32_t job_id, uint32_t rank);
  /// The lowest clock of the rank's pushes no chunk here has counted (UINT64_MAX: no
  /// chunk of the job here).
  uint64_t resume(uint32_t job_id, uint32_t rank);
  void abort(uint32_t job_id, errc code, const std::string& why);
  void drop(uint32_t job_id, errc code, const std::string& why);
  /// The periodic scan: steps past the step timeout, finished jobs past their time.
  void tick();
  /// Sends the held updates that are due (the --test-delay-answers hook).
  void send_held();
  shard_stats stats() const;
  job_counters counters(uint32_t job_id) const;

  // --- moving chunks -----------------------------------------------------------------
  shard_refusal hold(uint32_t job_id, settle_targets& reach);
  void fence(uint32_t job_id, const settle_targets& targets, snapshot_reply_ptr reply);
  shard_refusal reshape(job_setup& setup);
  shard_refusal takeover(route_change& rc);
  void thaw(uint32_t job_id);
  uint64_t prepare_hyper(uint32_t job_id, uint64_t id, const hyper_change& change);
  void end_hyper(uint32_t job_id, uint64_t id, bool apply);
  balance_plan plan(double share);
  shard_refusal expect(const shard_move& m);
  /// The chunks `m` takes from this shard, for the shard they go to (adopt).
  shard_refusal give(const shard_move& m, handoff_ptr& handoff);
  shard_refusal adopt(const handoff_ptr& handoff);

  const shard_settings& settings() const { return state.settings; }

  // What the handlers (handlers.hpp) share: the state, and the shard's own mailbox.
  struct shared_state {
    shard_settings settings;
    std::shared_ptr<detail::shard_book> book; // outlives the shard: its successor's
    // Updates and acks, held while one request serves many chunks
    // (logic/shard_answers).
    detail::shard_answers answers;
    // Updates of tensors the node was told to hold back (a test hook; inactive unless
    // settings.test_answer_delays names some).
    detail::held_answers held;
  } state;
  shard_outbox& out;
};

} // namespace rw::actors
