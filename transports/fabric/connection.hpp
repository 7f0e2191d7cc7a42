#pragma once
// One peer over libfabric, under the transport contract (transports/transport.hpp).
//
// Each side grants the other a window of receive slots (lent from the endpoint's
// receive pool and registered under a key of its own: the peer can write there and
// nowhere else) and says so in its FabricOffer.
// `send` takes one of the peer's free slots (a credit), fills it with one RMA write
// with immediate data (header then payload, gathered straight from the caller's
// memory, registered once through the endpoint's registration cache) and returns when
// the write completed locally, so the caller's memory is free again as after a TCP
// send. `post_batch` returns once a batch's writes are posted, with a mark; its
// completions are reaped in order by `wait_sent(mark)` (and by a sender short of ops),
// so that a shard has its answers to every worker in flight before it waits. The
// receiver hands the slot to its sink in place and, once the last reference to the
// frame is gone, gives it back with a credit message. Credits are owed, not sent one
// by one, while the peer keeps writing: one message gives back up to the peer's
// creditBatch slots, and a connection sends what it owes once it owes batch_at()
// slots or holds no frame of the peer's any more (nor does the endpoint's thread, in
// the middle of a round of completions), so a credit is never withheld for longer than
// some other frame of the same peer is held. A sender without credit
// waits at most the I/O timeout, then the connection is closed: a fast peer cannot
// overrun a slow one, and a peer that stops giving slots back is cut off.
//
// Send queue (a node's connections: endpoint_settings::send_queue_bytes > 0): a sender
// never waits for credit. A frame that finds no credit, or frames queued before it, is
// copied into the connection's queue, in order, and send returns at once; the
// endpoint's thread posts queued frames as credits come back (flush_queue) and frees
// each copy when its write completes. A queue over its bound, or one that no credit
// has moved for the I/O timeout, cuts the peer off: one worker that stops reading
// stalls nobody else. A frame with credit still waits for its own write's local
// completion (the provider's progress, not the peer's reading).
//
// Results in place: a worker names, per tensor, the output buffer of its operation
// (place_results: registered once through the cache, told to the node in a `place`
// frame). The node then writes each update's payload straight into that buffer and
// only its header, flagged placed, into a slot; the worker's sink finds the payload
// already where it wanted it (no copy). Placement is checked on both sides against
// the buffer's bounds; subscriptions' updates still travel through slots.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/control.hpp"
#include "runtime/topology.hpp"
#include "transports/fabric/core.hpp"
#include "transports/fabric/owed_credits.hpp"
#include "transports/fabric/slot_pool.hpp"
#include "transports/transport.hpp"

struct fi_rma_iov;

namespace rw::transports::fabric {

/// Tensors a connection keeps a placement for.
constexpr uint32_t max_placed_tensors = 1u << 16;

class connection final : public transports::connection,
                         public std::enable_shared_from_this<connection> {
public:
  /// Not bound yet: this side's slots (`slot_bytes` each, header included) are the
  /// window lent from the endpoint's receive pool. Use endpoint::open.
  connection(std::shared_ptr<core> c, std::string peer, uint32_t slot_bytes,
             std::unique_ptr<slot_pool::window> slots, int io_timeout_ms,
             uint64_t send_queue_bytes = 0);
  ~connection() override;

  /// What this side offers the peer (FabricOffer).
  protocol::fabric_offer offer() const;
  /// Takes the peer's offer: its address into the address vector, its slots as
  /// credits. Throws rw::error(errc::bad_frame) for an offer of another provider or one
  /// whose address the provider refuses.
  void bind(const protocol::fabric_offer& peer);

  bool send(const protocol::frame_header& h, const iovec* payload, int count) override;
  bool place_results(uint32_t tensor, float* dst, uint64_t bytes,
                     uint32_t chunk_bytes) override;
  using transports::connection::send;
  bool send_batch(const protocol::frame_header* headers, const iovec* payloads,
                  int n) override;
  uint64_t post_batch(const protocol::frame_header* headers, const iovec* payloads, int n,
                      bool& ok) override;
  bool wait_sent(uint64_t mark) override;
  void close() override;
  bool is_open() const noexcept override;
  const std::string& peer() const noexcept override { return peer_; }

  uint32_t index() const noexcept { return index_; }
  /// Why it closed (for the endpoint's report) and how.
  std::string close_reason() const;
  errc close_code() const noexcept { return close_code_; }
  /// Closes with a reason (the first reason given is kept).
  void fail(errc code, const std::string& why);

  // --- receiving (the endpoint's thread) ---------------------------------------------
  uint32_t slot_count() const noexcept { return slot_count_; }
  /// Marks slot `s` as holding a frame; false if it already did (the peer wrote into a
  /// slot it had not been given back).
  bool occupy(uint32_t s) noexcept;
  /// Decodes the header in slot `s`; false with `why` if it cannot be trusted.
  bool frame_at(uint32_t s, protocol::frame_header& h, std::string& why) const;
  std::byte* payload_at(uint32_t s) const noexcept;
  /// Gives slot `s` back to the peer (any thread): owed, and sent with others once
  /// batch_at() are owed or no frame of the peer's is held (see the top).
  void release(uint32_t s) noexcept;
  /// The endpoint's thread, around a round of completions: while held, credits for the
  /// frames it delivers and gives back at once are owed, and unhold() sends them.
  void hold() noexcept;
  void unhold() noexcept;
  /// Owed credits that send a message at once: the peer's creditBatch (as this side's
  /// inject size allows), at most an eighth of this side's slots, at least 1.
  uint32_t batch_at() const noexcept { return owed_.batch_at(); }
  /// Credit messages sent, and the slots they gave back.
  uint64_t credit_messages() const noexcept {
    return credit_messages_.load(std::memory_order_relaxed);
  }
  uint64_t credits_given() const noexcept {
    return credits_given_.load(std::memory_order_relaxed);
  }
  /// Where the payload of a placed frame `h` was written (inside a buffer this side
  /// named for its tensor), or null with `why`.
  std::byte* placed_at(const protocol::frame_header& h, std::string& why) const;
  /// The peer says where it wants a tensor's results; false with `why` if out of range.
  bool set_place(const protocol::fabric_place& p, std::string& why);
  /// Whether the peer named a buffer for `tensor`'s results.
  bool placing(uint32_t tensor) const;
  /// Frames sent, and of them updates written straight into the peer's buffers.
  uint64_t frames_sent() const noexcept { return sent_.load(std::memory_order_relaxed); }
  uint64_t placed_sent() const noexcept {
    return placed_sent_.load(std::memory_order_relaxed);
  }
  /// Frames that found no credit and waited in the send queue.
  uint64_t queued_frames() const noexcept {
    return queued_frames_.load(std::memory_order_relaxed);
  }
  /// The peer gave back slots[0..n) of its own; false at the first that was not out
  /// (the ones before it are taken back).
  bool credit(const uint16_t* slots, size_t n) noexcept;
  /// No write of this side is in flight: the connection may leave the table.
  bool idle() const noexcept;
  /// Send queue (the endpoint's thread): posts queued frames while credits last, frees
  /// the copies of writes that completed, and cuts the peer off when the queue has not
  /// moved for the I/O timeout. Returns whether frames still wait.
  bool flush_queue();
  /// Bytes waiting in the send queue.
  uint64_t queued_bytes() const;

  /// Whether a completion whose source the provider reported as `src` (an fi_addr_t,
  /// FI_SOURCE) came from this connection's peer: false before bind and for any other
  /// address (a notice or credit naming this connection from another endpoint).
  bool sent_by(uint64_t src) const noexcept {
    return src != ~uint64_t{0} && src == source_.load(std::memory_order_acquire);
  }

  bool adopted = false;       // endpoint thread: its frames are delivered
  bool reported = false;      // endpoint thread: its close was reported
  bool in_round = false;      // endpoint thread: held for this round (endpoint::drain)
  std::vector<uint32_t> held; // endpoint thread: slots written before adoption

private:
  friend class endpoint; // assigns the index
  struct local_place {   // a buffer this side named (place_results)
    std::shared_ptr<region> reg;
    std::byte* base = nullptr;
    uint64_t bytes = 0;
    uint32_t chunk_bytes = 0;
  };
  struct remote_place { // a buffer the peer named
    uint64_t address = 0;
    uint64_t key = 0;
    uint64_t bytes = 0;
    uint32_t chunk_bytes = 0;
  };
  int take_credit();
  int take_op();
  /// Posts one frame; -1 when it failed (the connection is closed then).
  int post(const protocol::frame_header& h, const iovec* payload, int count);
  /// Issues one RMA write for op `op`, then (with_data) the frame notice `data` for it;
  /// false when either failed (the connection is closed).
  bool issue(int op, const iovec* iov, void** desc, size_t pieces, const fi_rma_iov* rma,
             size_t targets, uint64_t data, bool with_data);
  /// Where an update's payload goes in the peer's memory, if the peer named a buffer
  /// for its tensor and the chunk fits in it.
  bool target_of(const protocol::frame_header& h, uint64_t bytes, fi_rma_iov& out);
  bool wait(int op);
  /// Whether op `op` (and the header write paired with it) has completed: then it is
  /// free again (a failed write closes the connection). Never waits.
  bool try_finish(int op);
  /// Frees the ops post_batch left in flight that have completed, oldest first, up to
  /// the first still pending. Never waits; takes inflight_mtx_ (not under credit_mtx_).
  void reap();
  bool credit_free();
  /// Sends the slots due in one credit message, if any (closes the connection when the
  /// provider will not take it).
  void send_owed(const owed_credits::batch& due) noexcept;
  /// Copies a frame to the back of the queue; false (the connection cut off) over the
  /// bound. Holds post_mtx_.
  bool enqueue(const protocol::frame_header& h, const iovec* payload, int count);
  /// Posts queued frames while credits last and reaps completed copies. Holds post_mtx_.
  void drain_queue();

  std::shared_ptr<core> core_;
  std::string peer_;
  int io_timeout_ms_;
  uint32_t index_ = 0;

  // This side's slots, written by the peer.
  uint32_t slot_bytes_;
  uint32_t slot_count_;
  std::unique_ptr<slot_pool::window> slots_;
  std::unique_ptr<std::atomic<bool>[]> occupied_;
  owed_credits owed_; // slots given back, not yet sent (held: occupy, hold)
  std::atomic<uint64_t> credit_messages_{0};
  std::atomic<uint64_t> credits_given_{0};

  // The peer's slots, written by this side.
  bool bound_ = false;
  uint64_t peer_addr_ = 0; // fi_addr_t
  /// peer_addr_ once bound, for the endpoint's thread (FI_ADDR_NOTAVAIL until then).
  std::atomic<uint64_t> source_{~uint64_t{0}};
  uint32_t peer_index_ = 0;
  uint64_t peer_slots_ = 0;
  uint64_t peer_key_ = 0;
  uint32_t peer_slot_bytes_ = 0;
  uint32_t peer_slot_count_ = 0;
  std::mutex credit_mtx_;
  std::condition_variable credit_cv_;
  std::deque<uint32_t> credits_;  // the peer's free slots
  std::vector<bool> out_;         // the peer's slots this side wrote, not yet back
  std::vector<uint32_t> op_slot_; // op -> the peer slot it writes
  std::vector<int> free_ops_;
  std::unique_ptr<tx_op[]> ops_;
  // Per op, registered: its frame header, then room for a small payload sent inline.
  static constexpr size_t inline_payload_bytes = 128;
  static constexpr size_t op_bytes = protocol::frame_header_bytes + inline_payload_bytes;
  std::vector<std::byte> headers_;
  std::unique_ptr<region> headers_region_;
  std::vector<int> paired_;       // op -> the header write posted before it, or -1
  std::vector<std::byte> bounce_; // for a frame in more pieces than the provider gathers
  std::mutex bounce_mtx_;

  mutable std::mutex place_mtx_;
  std::vector<local_place> local_places_;   // by tensor: where this side wants results
  std::vector<remote_place> remote_places_; // by tensor: where the peer wants them

  // The send queue (send_queue_bytes_ > 0). post_mtx_ orders posts: whoever posts
  // holds it from taking a credit to issuing the write.
  struct queued_frame {
    protocol::frame_header h;
    std::vector<std::byte> payload;
  };
  uint64_t send_queue_bytes_ = 0;
  std::mutex post_mtx_;
  std::deque<queued_frame> queue_;
  uint64_t queue_bytes_ = 0;            // in queue_
  std::atomic<uint64_t> queued_now_{0}; // queue_bytes_, for readers without the lock
  std::vector<std::pair<int, std::vector<std::byte>>>
    copies_;                                            // ops in flight, their copy
  std::chrono::steady_clock::time_point queue_moved_{}; // last post from the queue

  // Ops post_batch left in flight, in the order of their marks (any thread posts and
  // waits; wait_sent and take_op reap).
  std::mutex inflight_mtx_;
  std::deque<std::pair<int, uint64_t>> inflight_; // op, its mark
  uint64_t marked_ = 0;                           // the last mark given
  std::atomic<uint64_t> reaped_{0};               // every op up to this mark is finished

  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> queued_frames_{0};
  std::atomic<uint64_t> placed_sent_{0};
  std::atomic<bool> open_{true};
  mutable std::mutex why_mtx_;
  std::string why_;
  errc close_code_ = errc::ok;
};

} // namespace rw::transports::fabric
