#pragma once
// The answers a worker awaits, one slot per tensor: the operation armed on it (which
// frames answer it, where an update's floats land), which chunks are in, the replicas'
// acks a mirrored push waits for, and the tensor's subscription. A plain class with no
// sockets and no actor: worker_link's receiver thread feeds it the answers it reads
// (frames, or shared memory completions) and the proxy's thread arms it; it tells the
// proxy each outcome through link_events, once. Each chunk counts once per operation
// (a repeated answer, to a re-sent request, is ignored), and an answer that belongs to
// no armed operation (late, to one that failed) is refused. An outcome decided while a
// payload is still landing in the operation's buffer is held until that payload is in
// (landed), so the caller never frees a buffer that a frame is still written into.
// Thread-safe: each slot has its own lock; outcomes and subscription callbacks are
// called with no lock held.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "worker/link_events.hpp"

namespace rw::actors {

/// A callable that copies a chunk's result into a buffer (`dst`, maybe null), held by
/// reference for the length of one call: no allocation on the receiver's path.
class copy_into {
public:
  copy_into() = default;
  template <class F>
  copy_into(F& f) // NOLINT: converts from any callable(float*)
    : obj_(&f), call_([](void* o, float* dst) { (*static_cast<F*>(o))(dst); }) {}
  explicit operator bool() const noexcept { return call_ != nullptr; }
  void operator()(float* dst) const { call_(obj_, dst); }

private:
  void* obj_ = nullptr;
  void (*call_)(void*, float*) = nullptr;
};

/// An operation armed on a tensor: the answers it waits for.
struct armed_op {
  uint64_t seq = 0;           ///< the proxy's number for it (> 0)
  bool expect_update = false; ///< `update` frames (a pull, a push_pull), or `ack`s
  float* dst = nullptr;       ///< where updates land (the tensor's whole buffer)
  uint64_t version = 0;       ///< updates at this version or later; acks of this clock
  /// An "unchanged" ack for version - 1 also answers a chunk (a pull of changes).
  bool changes_only = false;
};

/// What to do with an answer's payload (answer_slots::begin).
enum class answer_verdict {
  stale,     ///< belongs to no armed operation: drop it
  ack,       ///< an ack of the armed operation: no payload to land
  land,      ///< land it at `dst`; landed() once it is in (or its connection closed)
  bad_length ///< an update of the armed operation with the wrong payload size
};

class answer_slots {
public:
  /// `chunk_counts[t]`: how many chunks tensor t has.
  explicit answer_slots(const std::vector<uint32_t>& chunk_counts);

  /// Where outcomes go (before the first answer).
  void set_events(std::shared_ptr<link_events> events) { events_ = std::move(events); }
  uint32_t num_tensors() const noexcept { return static_cast<uint32_t>(slots_.size()); }

  // The proxy's side.

  /// Arms `tensor` for `op`. `replica_awaited[c]` != 0: chunk c also waits for its
  /// replica's ack of the push (empty: no chunk does).
  void arm(uint32_t tensor, const armed_op& op,
           const std::vector<uint8_t>& replica_awaited = {});
  /// Updates flagged as subscribed land in `dst`; `on_version(v)` runs (unlocked, on the
  /// thread that fed the answer) once every chunk reached version v.
  void subscribe(uint32_t tensor, float* dst, std::function<void(uint64_t)> on_version);
  /// True if operation `seq` already has `answered` chunks answered or is over;
  /// otherwise false, and link_events::answered(tensor, seq) is called once it has
  /// (never, if it ends first). One wait per tensor: a later call replaces it.
  bool wake_when_answered(uint32_t tensor, uint64_t seq, uint32_t answered);
  /// Whether chunk `chunk` of the armed (or last) operation is answered, its replica's
  /// ack included where one is awaited.
  bool chunk_arrived(uint32_t tensor, uint32_t chunk) const;
  /// Of the last completed operation on `tensor`: the largest staleness served, and how
  /// many chunks were answered as changed (updates; an unchanged ack is not).
  uint32_t last_staleness(uint32_t tensor) const noexcept {
    return last_[tensor]->staleness.load(std::memory_order_acquire);
  }
  uint32_t last_changed(uint32_t tensor) const noexcept {
    return last_[tensor]->changed.load(std::memory_order_acquire);
  }

  // The receiver's side: answers as they come.

  /// An update's or ack's header for (tensor, chunk) about `clock`. `length_ok`: an
  /// update's payload has the chunk's size. On `land`, `dst` is where the chunk goes
  /// and the operation's outcome waits for landed(tensor).
  answer_verdict begin(uint32_t tensor, uint32_t chunk, bool is_update, bool unchanged,
                       uint64_t clock, bool length_ok, float*& dst);
  /// A payload that begin() let land is in, or its connection closed mid-payload.
  void landed(uint32_t tensor);
  /// The answer whose header took begin() is in: counted for the armed operation
  /// (`staleness` served, `changed` for an update). `landing`: its payload landed
  /// (begin said `land`); that and the count are one step, so an outcome held for the
  /// landing is told before anything is counted for an operation armed after it.
  void answered(uint32_t tensor, uint32_t chunk, uint32_t staleness, bool changed,
                bool landing);
  /// A whole answer at once (shared memory): if it belongs to the armed operation,
  /// `copy(dst)` runs under the slot's lock (dst: the operation's buffer, maybe null),
  /// then the chunk is counted. False if it belongs to none.
  bool answer_whole(uint32_t tensor, uint32_t chunk, bool is_update, bool unchanged,
                    uint64_t clock, uint32_t staleness, copy_into copy);
  /// The replica of `chunk` acked the push of `clock`.
  void replica_acked(uint32_t tensor, uint32_t chunk, uint64_t clock);
  /// Chunks whose replica `has_replica(tensor, chunk)` no longer names: their acks are
  /// awaited no more (the job's ring changed).
  void replicas_changed(const std::function<bool(uint32_t, uint32_t)>& has_replica);
  /// The node failed the armed operation. False if none is armed (a late error).
  bool fail(uint32_t tensor, errc code, std::string why);
  /// The subscription's destination (null: none).
  float* subscription(uint32_t tensor) const;
  /// A subscribed update of `chunk` at `version`: `copy(dst)` first (null: none) under
  /// the slot's lock; announces the version every chunk has reached, if new.
  void published(uint32_t tensor, uint32_t chunk, uint64_t version, copy_into copy = {});

private:
  struct outcome {
    uint64_t seq;
    errc code; // ok: done
    std::string why;
  };
  struct slot {
    mutable std::mutex mtx;
    armed_op op; // op.seq == 0: nothing armed
    uint32_t remaining = 0;
    uint32_t answered = 0;  // chunks answered (replicas' acks aside)
    uint32_t wake_at = 0;   // tell the proxy once `answered` reaches it (0: nobody asked)
    uint32_t staleness = 0; // the largest served to the armed operation so far
    uint32_t changed = 0;
    std::vector<uint8_t> arrived;  // by chunk, for the armed (or last) operation
    bool mirror = false;           // replicas' acks awaited too
    uint64_t push_clock = 0;       // the clock those acks carry
    std::vector<uint8_t> mirrored; // by chunk: its replica acked (or it has none)
    uint32_t landings = 0;         // payloads landing in op.dst now
    std::optional<outcome> held;   // decided while landings > 0: told when they end
    float* sub_dst = nullptr;
    std::function<void(uint64_t)> on_version;
    std::vector<uint64_t> sub_versions; // by chunk; UINT64_MAX: none yet
    uint64_t sub_min = UINT64_MAX;      // every chunk is at least here
  };
  struct last_op {
    std::atomic<uint32_t> staleness{0};
    std::atomic<uint32_t> changed{0};
  };
  // What the caller tells once the slot is unlocked.
  struct to_tell {
    std::optional<outcome> told;
    bool wake = false;
    uint64_t wake_seq = 0;
  };

  static bool belongs(const slot& s, bool is_update, bool unchanged, uint64_t clock);
  // With the slot locked: one payload that was landing in op.dst is in; once none is,
  // an outcome held for them is to be told.
  static void end_landing(slot& s, to_tell& t);
  // With the slot locked: counts chunk `chunk` of the armed operation.
  void count(uint32_t tensor, slot& s, uint32_t chunk, uint32_t staleness, bool changed,
             to_tell& t);
  void count_mirror(uint32_t tensor, slot& s, uint32_t chunk, to_tell& t);
  void finish_if_done(uint32_t tensor, slot& s, to_tell& t);
  void complete(slot& s, errc code, std::string why, to_tell& t);
  // With the slot locked: the version to announce (UINT64_MAX: none).
  static uint64_t advance(slot& s, uint32_t chunk, uint64_t version);
  void tell(uint32_t tensor, to_tell t);
  void announce(uint32_t tensor, uint64_t version);

  std::vector<std::unique_ptr<slot>> slots_;
  std::vector<std::unique_ptr<last_op>> last_;
  std::shared_ptr<link_events> events_;
};

} // namespace rw::actors
