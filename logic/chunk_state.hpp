#pragma once
// One chunk's BSP state on its shard: parameters, optimizer state, version, and the
// step in progress. Pure logic, no actors, no sockets: the shard drives it and sends
// what it returns.
//
// Summation is in worker-rank order whatever the arrival order: rank 0's buffer becomes
// the running sum, and rank r is added as soon as ranks 0..r-1 have been, so a buffer
// that arrives early is held (by reference) until its turn. The last rank's gradient
// is added by the fused kernel in the same pass as the optimizer step. When rank 0's
// payload is read-only (a worker's shared memory) nothing can be added into it: the
// views are held until the step is complete and summed then, tile by tile in cache
// (runtime::step_inputs). Either way the result is bitwise what one process gets
// summing the same gradients in rank order.
//
// Clocks (BSP): version v means v updates applied. A push for clock v counts towards
// the step in progress; a push for v+1 (a worker that pushed without waiting) is held
// for the next step; anything older is a duplicate and anything newer is refused.
//
// Replicas (replicas = 1, BSP): a chunk's home sums its step, then sends the sum to
// the chunk's replica node (prepare_mirror) and closes the step; only once the replica
// has it (end_mirror) does the optimizer run from that sum, so no version is answered
// that the replica could not rebuild. The replica takes the sum as the whole step
// (push_total) and runs the same optimizer on it: both copies stay bitwise equal.
//
// SSP and async: every push is its own update, applied as it arrives (so version is the
// number of pushes applied from all ranks); a rank's pushes must come in clock order.
// A push_pull from a rank at clock c waits until every rank has pushed at least
// c + 1 - s times (SSP), or not at all (async); the staleness it is served is how far
// the slowest rank's pushes are behind c + 1.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/half.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "transports/transport.hpp"

namespace rw::actors::detail {

/// A worker waiting for this chunk: until its version is at least `version` and (SSP)
/// every rank has pushed at least `min_pushes` times.
struct waiter {
  transports::connection_ptr conn;
  uint32_t rank;
  uint64_t version;
  uint64_t min_pushes = 0;
  uint64_t reader_clock = 0; // the clock the answer is for (staleness is measured to it)
  /// When the request began waiting (epoch: not counted, as for subscriptions).
  std::chrono::steady_clock::time_point since{};
  /// A push without want_result of a replicated chunk: answered with an ack (not the
  /// parameters) once its step is on the replica too.
  bool ack_only = false;

  /// How far along the waiting worker is: lower means further behind.
  uint64_t progress() const noexcept {
    return reader_clock != 0 ? reader_clock : version;
  }
};

class chunk_state {
public:
  enum class outcome {
    counted,       // taken; the step still waits for other ranks
    step_ready,    // every rank is in: call complete_step()
    duplicate,     // this rank's push for this clock was already counted
    too_far_ahead, // clock beyond version + 1
  };

  /// The chunk's memory (parameters, and the optimizer's m and v where it has them,
  /// each `length` floats, zeroed) belongs to the caller: the shard's NUMA-local arena.
  chunk_state(uint32_t length, uint32_t workers, float* params, float* m, float* v,
              bool wait_for_init, consistency_spec consistency = {}, float* d = nullptr);

  uint32_t length() const noexcept { return length_; }
  uint64_t version() const noexcept { return version_; }
  bool initialized() const noexcept { return initialized_; }
  const float* params() const noexcept { return params_; }
  /// The parameters as a 16-bit payload of `flag` (protocol/half.hpp: flag_bf16 or
  /// flag_fp16; a job with compress_updates), packed on first use per version and kept
  /// until the parameters change: every worker answered gets the same bytes, packed once.
  const std::vector<std::byte>& packed(uint16_t flag) const;

  /// Work this chunk gave its shard since the last take_load() (the shard adds it per
  /// push it counts): what balancing weighs chunks by (actors/shard/balance). It moves
  /// with the chunk.
  void add_load(uint64_t units) noexcept { load_ += units; }
  uint64_t take_load() noexcept { return std::exchange(load_, 0); }
  uint64_t load() const noexcept { return load_; }

  /// Checkpoints (BSP, between steps): the chunk's parameters, optimizer arrays and
  /// version, copied. Only called at a checkpoint's clock, never on an ordinary step.
  runtime::checkpoint::chunk_record snapshot(uint32_t tensor, uint32_t chunk) const;
  /// Takes the state a checkpoint holds as this chunk's version: parameters, the
  /// optimizer arrays this chunk has, the version; the chunk needs no init. Returns
  /// what does not fit (a length, an array the optimizer lacks or needs), else "".
  std::string restore(const runtime::checkpoint::chunk_record& r);

  /// The optimizer state a worker reads and loads (`state` frames), between steps: the
  /// arrays kept (m, then v, where the optimizer has them), how many, and array k (null
  /// past them).
  uint32_t state_arrays() const noexcept { return (m_ ? 1u : 0u) + (v_ ? 1u : 0u); }
  const float* state_array(uint32_t k) const noexcept {
    return k == 0 ? (m_ ? m_ : v_) : k == 1 && m_ ? v_ : nullptr;
  }
  /// Why the chunk cannot take a saved state of clock `clock` now ("" if it can): it
  /// must be initialized, have nothing of a step in it (settled) and be at version 0,
  /// or at `clock` already (a load sent again).
  std::string cannot_load(uint64_t clock) const;
  /// Loads array k (length() floats) of a saved state; check cannot_load first.
  /// Returns false if the chunk keeps no array k.
  bool load_array(uint32_t k, const float* values);
  /// The saved state's clock becomes the chunk's version (the steps it counts, Adam's
  /// bias correction too); check cannot_load first.
  void load_version(uint64_t clock);

  /// Sets version-0 values (rank 0's init). Returns false if already initialized or
  /// past version 0.
  bool init(const float* values);

  /// Counts rank's gradient for `clock` (data holds length() floats).
  outcome push(uint32_t rank, uint64_t clock, runtime::buffer_ref data,
               std::chrono::steady_clock::time_point now);

  /// Whether an update can run: every rank's push for the step is in (BSP), or any
  /// push is waiting to be applied (SSP, async).
  bool step_ready() const noexcept {
    if (consistency_.model == consistency_spec::bsp)
      return initialized_ && !layerwise_pending_ && !relay_pending_ && !mirror_pending_
             && (arrivals_ == workers_ || total_);
    return initialized_ && arrivals_ > 0;
  }

  /// Moving the chunk (a drain, BSP): whether nothing of a step is in it (it is
  /// initialized, no push counted towards an open step or held for the next, no phase
  /// pending), so its parameters, optimizer state and version are all of it.
  bool settled() const noexcept {
    if (!initialized_ || arrivals_ > 0 || layerwise_pending_ || relay_pending_
        || mirror_pending_ || total_ || total_ahead_)
      return false;
    for (auto& a : ahead_)
      if (a)
        return false;
    return true;
  }
  /// Moving a layer-wise job (LAMB, LARS): how far this chunk's tensor must get before
  /// it settles. A tensor's step needs every chunk's norms, so every chunk of it settles
  /// at one version, the highest any of them reaches: its version, one more when a step
  /// is begun here (a push counted, or a phase pending), two more when a push for the
  /// next step is held. Whoever began a step sends it to every chunk of the tensor.
  uint64_t settle_reach() const noexcept {
    if (total_ahead_)
      return version_ + 2;
    for (auto& a : ahead_)
      if (a)
        return version_ + 2;
    if (arrivals_ > 0 || layerwise_pending_ || relay_pending_ || mirror_pending_
        || total_)
      return version_ + 1;
    return version_;
  }
  /// While the chunk settles for a move: whether a push for `clock` may still be
  /// counted. Only one that finishes what was begun: a repeat, a push into the open
  /// step (some rank is in it) or into the held next step (some rank is held there).
  bool settling_admits(uint64_t clock) const noexcept {
    if (clock < version_)
      return true;
    if (clock == version_)
      return arrivals_ > 0;
    if (clock == version_ + 1)
      for (auto& a : ahead_)
        if (a)
          return true;
    return false;
  }

  /// Layer-wise optimizers (LAMB, LARS), phase 1, when step_ready(): sums the step's
  /// gradients (rank order), prepares the direction and returns what this chunk adds
  /// to the tensor's norms. The step stays closed until finish_layerwise.
  runtime::norm_parts prepare_layerwise(const optimizer_spec& spec, float rescale);
  bool layerwise_pending() const noexcept { return layerwise_pending_; }
  /// Phase 2: applies the direction scaled by the tensor's trust ratio, bumps the
  /// version and opens the next step.
  void finish_layerwise(const optimizer_spec& spec, float trust,
                        std::chrono::steady_clock::time_point now);

  /// Hierarchical reduction (a rack's part of a job), phase 1, when step_ready(): sums
  /// the step's gradients in rank order into the relay buffer (`d`, given at
  /// construction) and returns it: the rack's partial sum, for the chunk's home, whose
  /// answer may be received into the same buffer. The parameters stay as they are and
  /// the step stays closed until finish_relay.
  float* prepare_relay();
  bool relay_pending() const noexcept { return relay_pending_; }
  /// Phase 2: the home's parameters for version() + 1 (length() floats) replace ours:
  /// received in the relay buffer, they swap places with them (no copy: a rack job's
  /// parameters are its own, never a shared segment); bumps the version and opens the
  /// next step.
  void finish_relay(const float* params, std::chrono::steady_clock::time_point now);

  /// Replicated chunks (BSP), the home, when step_ready(): sums the step's gradients
  /// (rank order) into `d` and returns it, for the replica. The step stays closed until
  /// end_mirror(); then step_ready() again, and the step runs from that sum.
  const float* prepare_mirror();
  bool mirror_pending() const noexcept { return mirror_pending_; }
  /// Whether the step's sum is in `d` already (sent to the replica): it is not sent again.
  bool summed() const noexcept { return summed_; }
  /// The sum prepare_mirror() returned, while mirror_pending().
  const float* mirror_sum() const noexcept { return d_; }
  /// The replica has the step's sum (its ack), or there is no replica any more.
  void end_mirror() noexcept { mirror_pending_ = false; }
  /// The replica's side: the home's sum of step `clock` (length() floats), taken as
  /// the whole step (duplicate: it has it, or has applied it; too_far_ahead: beyond
  /// the step after the next).
  outcome push_total(uint64_t clock, runtime::buffer_ref sum);

  /// The waiter for a push_pull of `rank` at `clock` under this chunk's model.
  waiter push_waiter(transports::connection_ptr conn, uint32_t rank,
                     uint64_t clock) const;

  /// How stale an answer to `w` would be now (0 under BSP).
  uint64_t staleness(const waiter& w) const noexcept {
    return w.reader_clock > min_pushes_ ? w.reader_clock - min_pushes_ : 0;
  }
  /// Fewest pushes any rank has had applied (SSP, async).
  uint64_t min_pushes() const noexcept { return min_pushes_; }

  /// Runs the optimizer on the sum, bumps the version and opens the next step with
  /// any pushes that were held for it. Precondition: step_ready().
  void complete_step(const optimizer_spec& spec, float rescale,
                     std::chrono::steady_clock::time_point now);

  /// Adds a waiter; answer it at once if take_ready() returns it.
  void wait(waiter w) { waiters_.push_back(std::move(w)); }
  /// Adds `w` unless the same answer already waits for its connection (same rank,
  /// version, pushes and kind): a push repeated while its step is open is answered once,
  /// when its version exists, so a peer repeating it cannot grow the list (and each
  /// push's scan of it) without bound. False if it was already there.
  bool wait_once(waiter w);
  /// Whether `conn` may add one more pull waiter here: it has fewer than
  /// defaults::max_waiting_pulls waiting on this chunk (a peer repeating pulls for a
  /// version to come cannot grow the list without bound).
  bool may_wait(const transports::connection_ptr& conn) const noexcept;

  /// Removes and returns the waiters whose version is now available: in arrival order,
  /// or (by_lag) the worker furthest behind (lowest clock) first.
  std::vector<waiter> take_ready(bool by_lag = false);

  /// Removes and returns every waiter (the job failed).
  std::vector<waiter> take_all();

  /// Adds a standing subscriber: every new version goes to it (publish()). A
  /// connection subscribes once: subscribing again on it starts its subscription over
  /// (the current version goes to it again), it does not add a second one.
  void subscribe(waiter w);
  /// The subscribers to send the current version to, if it is one they have not had
  /// (it advanced since the last call, or they are new); drops closed connections.
  std::vector<waiter> publish();

  /// True while a step has some but not all ranks.
  bool step_open() const noexcept { return arrivals_ > 0; }
  std::chrono::steady_clock::time_point opened_at() const noexcept { return opened_at_; }
  /// Ranks the open step still waits for.
  std::vector<uint32_t> missing_ranks() const;
  /// Whether `rank` has pushed enough for an answer to a push_pull at `clock`: its
  /// push for that clock (BSP), or at least clock + 1 - s pushes (SSP); async needs
  /// nothing from anyone.
  bool has_pushed(uint32_t rank, uint64_t clock) const noexcept {
    switch (consistency_.model) {
      case consistency_spec::async: return true;
      case consistency_spec::ssp:
        return clock < consistency_.staleness
               || pushes_[rank] + (held_[rank] ? 1 : 0)
                    >= clock + 1 - consistency_.staleness;
      case consistency_spec::bsp: break;
    }
    if (clock < version_)
      return true;
    if (clock == version_)
      return arrived_[rank];
    return clock == version_ + 1 && static_cast<bool>(ahead_[rank]);
  }
  /// Whether a push at `clock` only makes sense if every rank can still push (BSP: the
  /// step needs them all; SSP and async: only a push that wants an answer waits).
  bool push_needs_everyone(bool want_result) const noexcept {
    return consistency_.model == consistency_spec::bsp || want_result;
  }
  /// Whether the open step (BSP), or a waiter (SSP), still needs `rank`.
  bool needs(uint32_t rank) const noexcept;
  /// The clock of `rank`'s next push this chunk has not counted: where a worker that
  /// restarts goes on from (its pushes below it are duplicates here).
  uint64_t next_clock(uint32_t rank) const noexcept {
    if (consistency_.model != consistency_spec::bsp)
      return pushes_[rank] + (held_[rank] ? 1 : 0);
    return version_ + (arrived_[rank] ? 1 : 0) + (ahead_[rank] ? 1 : 0);
  }

private:
  void absorb_in_order();
  void apply_arrivals(const optimizer_spec& spec, float rescale);
  // The running sum (if any) and the ranks not yet added, in rank order.
  uint32_t gather_inputs(const float** in, std::vector<const float*>& more) const;
  void release_inputs();
  void open_next_step(std::chrono::steady_clock::time_point now);
  // Ranks summed ahead of the step: all but the last (which the fused step adds).
  uint32_t absorb_limit() const noexcept {
    return workers_ > 1 ? workers_ - 1 : workers_;
  }

  uint32_t length_;
  uint32_t workers_;
  float* params_;
  float* m_;
  float* v_;
  // Sums the step's gradients, rank order, into `out` and releases them.
  void sum_step_into(float* out);

  float* d_; // layer-wise direction, a rack's partial sum, or a replicated step's sum
  bool layerwise_pending_ = false;
  bool relay_pending_ = false;
  bool mirror_pending_ = false; // the home waits for its replica's ack of the sum in d_
  bool summed_ = false;         // the step's sum is in d_ (the replica has it)
  runtime::buffer_ref total_;   // a replica: the home's sum of step version_
  runtime::buffer_ref total_ahead_; // ... and of the step after it
  uint64_t version_ = 0;
  // packed()'s cache: the payload of packed_version_ (UINT64_MAX: none, or the
  // parameters changed without a new version: an init, a restore).
  mutable std::vector<std::byte> packed_;
  mutable uint64_t packed_version_ = UINT64_MAX;
  bool initialized_;

  // The step in progress (clock == version_).
  std::vector<runtime::buffer_ref> held_; // by rank, not yet summed
  std::vector<bool> arrived_;
  uint32_t arrivals_ = 0;
  uint32_t next_ = 0; // next rank to add to the sum
  runtime::buffer_ref sum_;
  std::chrono::steady_clock::time_point opened_at_{};

  // Pushes for clock version_ + 1, held until the step above completes.
  std::vector<runtime::buffer_ref> ahead_;

  std::vector<waiter> waiters_;
  std::vector<waiter> subscribers_; // version field: the newest version each has had

  consistency_spec consistency_;
  std::vector<uint64_t> pushes_; // SSP, async: pushes applied, by rank
  uint64_t min_pushes_ = 0;
  uint64_t load_ = 0;
};

} // namespace rw::actors::detail
