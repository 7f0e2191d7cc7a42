#pragma once
// A fabric endpoint: one reliable-datagram endpoint on a NIC's domain and every
// connection made on it, driven by one thread (the NIC poller's, or a worker's
// receiver). Connections are made in two halves: `open` allocates and registers this
// side's slots (its offer), `connection::bind` takes the peer's offer; frames the peer
// writes before `adopt` are held and delivered in order once adopted.
//
// Receiving: a peer writes a frame into one of its slots here (RMA, under that window's
// own key), then sends a frame notice naming (connection, slot) (core.hpp); the header
// is read from the slot and the payload handed to the sink in place (push, init and
// pull as resident frames, zero-copy; other kinds through on_header / on_frame). The
// provider reports each notice's and credit message's sender (FI_SOURCE): one that
// names a connection whose peer did not send it is ignored, as is one that names no
// slot and a write that carries an immediate; all are counted and logged (the sender
// cannot be told apart from noise, so nobody is cut off for it). A notice for a slot
// still held, or a header that does not decode, closes that connection (the sink hears
// why). Others go on.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rackweave/defaults.hpp"
#include "transports/fabric/connection.hpp"
#include "transports/fabric/domain.hpp"
#include "transports/transport.hpp"

namespace rw::transports::fabric {

struct endpoint_settings {
  uint32_t slots = 256; // receive slots granted to each peer (credits), at most 4096
  /// At most this much slot memory per connection: jobs with large chunks get fewer
  /// slots (never fewer than 4).
  uint64_t max_bytes_per_connection = 64ull << 20;
  /// The receive pool, allocated when the endpoint is made; each connection's slots are
  /// a window of it, registered on its own when the connection opens. 0: room for
  /// exactly one connection of the largest window (a worker's endpoint; pool_for_one).
  uint64_t pool_bytes = 256ull << 20;
  uint32_t numa = 0; // where slot memory lives (the NIC's domain)
  /// Results placed straight into the receiver's buffers: at most this (the provider's
  /// best otherwise; tests lower it to exercise `ordered` and `off`).
  placement max_placement = placement::scatter;
  /// The cache of memory sent from, shared with whoever pins memory ahead of sending
  /// (core::make_send_cache; null: the endpoint's own).
  std::shared_ptr<registration_cache> send_memory;
  int io_timeout_ms = defaults::io_timeout_ms;
  /// Each connection's send queue bound (connection.hpp, "Send queue"): a node's sends
  /// never wait for a peer's credit. 0: a sender waits for credit (a worker's endpoint).
  uint64_t send_queue_bytes = 0;
  /// Which of its NIC's endpoints this is, and of how many (describe() names it "#k"
  /// when there are several).
  uint32_t index = 0;
  uint32_t per_nic = 1;
};

/// Slot bytes (header included, 64-byte multiple) for frames of up to `max_payload`.
uint64_t slot_bytes_for(uint32_t max_payload);
/// A pool that holds one connection's largest window for frames of `max_payload`.
uint64_t pool_for_one(const endpoint_settings& s, uint32_t max_payload);

class endpoint final : public transports::endpoint {
public:
  /// Allocates the receive pool (and registers it once, to fail now rather than at a
  /// worker's connect). Throws rw::error(errc::unavailable) if the provider cannot open
  /// an endpoint, rw::error(errc::io_error) naming ulimit -l if it will not register
  /// the pool.
  endpoint(std::shared_ptr<domain> d, endpoint_settings s);
  /// A worker's endpoint: its pool holds one connection for frames of `max_payload`.
  endpoint(std::shared_ptr<domain> d, endpoint_settings s, uint32_t max_payload);
  ~endpoint() override;

  /// A new connection to `peer` (named for logs) whose slots take frames with up to
  /// `max_payload` payload bytes, lent from the receive pool. Thread-safe. Throws
  /// rw::error(errc::unavailable) when the pool has no room (the message names
  /// --fabric-pool).
  std::shared_ptr<connection> open(const std::string& peer, uint32_t max_payload);

  void adopt(connection_ptr c) override;
  int poll(int timeout_ms, frame_sink& sink) override;
  void close_all(frame_sink& sink) override;
  size_t connection_count() const noexcept override;
  std::string describe() const override;

  const domain& fabric_domain() const noexcept { return *core_->dom; }
  /// How results are placed into peers' buffers here.
  placement result_placement() const noexcept { return core_->place_mode; }
  /// Updates that arrived already in their output buffer (placed), since the start.
  uint64_t placed_frames() const noexcept { return placed_.load(); }
  /// Messages ignored since the start: a frame notice or credit message that named no
  /// slot, or a connection whose peer did not send it; a write with an immediate.
  uint64_t bad_immediates() const noexcept { return bad_imm_.load(); }
  /// Receives that failed (a message longer than a credit message, truncated), dropped.
  uint64_t failed_receives() const noexcept { return failed_rx_.load(); }
  const slot_pool& pool() const noexcept { return *pool_; }
  /// Local registrations made for sending (steady state: no new ones).
  uint64_t registrations() const noexcept { return core_->send_memory->registrations(); }
  /// Registrations of output buffers for peers' writes (placed results).
  uint64_t result_registrations() const noexcept {
    return core_->target_memory->registrations();
  }
  /// Registers [p, p + n) now, for as long as the handle lives: for sends from it and,
  /// where results are placed, for peers' writes into it (registration_cache::pin), so
  /// neither registers on the way. A worker's buffers made once and reused every step.
  /// Throws rw::error(errc::io_error) as region does.
  std::shared_ptr<void> pin(const void* p, size_t n);

private:
  /// A frame notice `imm` from `src` (the provider's FI_SOURCE address).
  void on_write(uint64_t imm, uint64_t src, frame_sink& sink);
  /// A credit message from `src`: its immediate's slot, and `bytes` more in `more`.
  void on_credit(uint64_t imm, uint64_t src, const std::byte* more, size_t bytes);
  /// A notice or credit message ignored (`what`): counted, logged at most once a while.
  void dropped(const std::string& what);
  std::string source_name(uint64_t src) const;
  /// Connections written to in this round of completions (drain): held, so that the
  /// credits of frames given back at once go in batches; unheld when the round ends.
  struct round_holder {
    explicit round_holder(endpoint& e) : e_(e) { e_.round_ = &list_; }
    ~round_holder() {
      e_.round_ = nullptr;
      for (auto& c : list_) {
        c->in_round = false;
        c->unhold();
      }
    }
    endpoint& e_;
    std::vector<std::shared_ptr<connection>> list_;
  };
  std::vector<std::shared_ptr<connection>>* round_ = nullptr;
  void deliver(const std::shared_ptr<connection>& c, uint32_t slot, frame_sink& sink);
  int drain(int timeout_ms, frame_sink& sink);
  void sweep(frame_sink& sink);

  std::shared_ptr<core> core_;
  endpoint_settings settings_;
  std::shared_ptr<slot_pool> pool_;
  std::mutex incoming_mtx_;
  std::vector<std::shared_ptr<connection>> incoming_; // adopted, not yet polled
  std::atomic<size_t> live_{0};
  std::atomic<uint64_t> bad_imm_{0};
  std::atomic<uint64_t> failed_rx_{0};
  std::chrono::steady_clock::time_point failed_rx_logged_{}; // the endpoint's thread
  std::atomic<uint64_t> placed_{0};
  std::chrono::steady_clock::time_point bad_imm_logged_{}; // rate-limits their log line
  uint64_t swept_epoch_ = 0;
  bool pending_removal_ = false;
  /// Send queues: every connection's is flushed (and its stall checked) this often,
  /// besides when a credit comes back.
  std::chrono::steady_clock::time_point next_flush_{};
  void flush_queues();
};

} // namespace rw::transports::fabric
