#pragma once
// What a fabric endpoint and its connections share: one reliable-datagram endpoint on
// the domain, its address vector, a receive completion queue (RMA writes with
// immediate data into this side's slots, and credit messages) and a transmit one, the
// small receive buffers credit messages land in, and the table of connections by the
// index peers stamp into their immediates.
//
// Immediate data (32 bits) rides on small messages only, never on RMA writes: a
// provider reports who sent a message (FI_SOURCE), and the endpoint checks it against
// the connection the immediate names, while ofi_rxm reports no sender for a write's
// immediate. Its bits: a notice bit (31), the receiver's connection index (19 bits) and
// a slot of that connection (12 bits).
//  - A frame notice (bit set, no payload) follows the RMA write that filled the named
//    slot: the provider delivers it after the write's data (FI_ORDER_SAW).
//  - A credit message (bit clear) names a slot of the receiver's peer that is free
//    again, and its payload (empty, or up to credit_batch_accepted - 1 little-endian
//    16-bit slot numbers, to a peer whose offer said it takes them) more such slots.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transports/fabric/domain.hpp"
#include "transports/fabric/registration.hpp"

struct fid_ep;
struct fid_av;
struct fid_cq;

namespace rw::transports::fabric {

constexpr uint32_t slot_bits = 12;
constexpr uint32_t notice_bit = 1u << 31;
constexpr uint32_t max_slots = 1u << slot_bits;              // per connection
constexpr uint32_t max_connections = 1u << (31 - slot_bits); // per endpoint

/// A credit message's immediate.
constexpr uint32_t immediate(uint32_t conn_index, uint32_t slot) {
  return conn_index << slot_bits | slot;
}
/// A frame notice's immediate: the write into `slot` of the receiver's connection
/// `conn_index` is complete.
constexpr uint32_t frame_notice(uint32_t conn_index, uint32_t slot) {
  return notice_bit | immediate(conn_index, slot);
}
constexpr bool is_frame_notice(uint64_t imm) {
  return (static_cast<uint32_t>(imm) & notice_bit) != 0;
}
constexpr uint32_t imm_connection(uint64_t imm) {
  return (static_cast<uint32_t>(imm) & ~notice_bit) >> slot_bits;
}
constexpr uint32_t imm_slot(uint64_t imm) {
  return static_cast<uint32_t>(imm) & (max_slots - 1);
}

/// Bytes of a posted receive (credit messages land there).
constexpr size_t credit_receive_bytes = 64;
/// Slots one credit message may give back to this side: one in its immediate, the rest
/// in its payload (FabricOffer.creditBatch).
constexpr uint32_t credit_batch_accepted = 32;
static_assert((credit_batch_accepted - 1) * 2 <= credit_receive_bytes);

/// A transmit in flight: its completion sets `state` (the context is its first member).
struct tx_op {
  alignas(8) unsigned char context[64]; // fi_context2, kept opaque here
  enum : int { idle = 0, pending = 1, done = 2 };
  std::atomic<int> state{idle}; // idle, pending, done, or -errno
};

class connection;

struct core {
  /// Opens an endpoint on `d`: throws rw::error(errc::unavailable) with the provider's
  /// reason. `send_memory`: the cache of memory it sends from (shared with whoever pins
  /// memory ahead, a node's shards); null: its own.
  explicit core(std::shared_ptr<domain> d,
                std::shared_ptr<registration_cache> send_memory = nullptr);
  ~core();
  core(const core&) = delete;
  core& operator=(const core&) = delete;

  /// A cache for memory to send from on `d` (FI_SEND | FI_WRITE).
  static std::shared_ptr<registration_cache> make_send_cache(std::shared_ptr<domain> d);

  /// This endpoint's address, as peers insert it into their address vectors.
  std::vector<std::byte> address() const;

  /// Reads the transmit queue's completions (any thread; one at a time, others skip).
  void progress_tx() noexcept;

  /// Sends one credit message for slots[0..n) (n at most credits_per_message()) to the
  /// peer at `dest`, stamped with the peer's index of this connection. False if the
  /// provider would not take it within `timeout_ms`.
  bool send_credits(uint64_t dest, uint32_t peer_index, const uint16_t* slots, size_t n,
                    int timeout_ms) noexcept;
  /// Sends a frame notice (`imm`, frame_notice) to the peer at `dest`, after the write
  /// it announces was posted. False if the provider would not take it in `timeout_ms`.
  bool send_notice(uint64_t dest, uint32_t imm, int timeout_ms) noexcept;
  /// Slots one credit message from this side may carry, as the provider's inject size
  /// allows (at most credit_batch_accepted; 1 when it injects no payload).
  uint32_t credits_per_message() const noexcept { return credits_per_message_; }
  /// Receive buffer `i`'s bytes (a credit message's payload, until it is reposted).
  const std::byte* receive_buffer(size_t i) const noexcept;

  /// Reposts receive buffer `i` (after its message or its consumed immediate).
  void repost(size_t i) noexcept;
  /// The posted receive buffer `context` belongs to, or SIZE_MAX.
  size_t receive_of(void* context) const noexcept;

  std::shared_ptr<domain> dom;
  fid_ep* ep = nullptr;
  fid_av* av = nullptr;
  fid_cq* rx_cq = nullptr;
  fid_cq* tx_cq = nullptr;
  bool rx_waitable = false; // rx_cq has a wait object: fi_cq_sread blocks on it
  std::atomic<uint64_t> closed_epoch{0}; // bumped by each connection that closes
  /// Local buffers this side sends from (tensors, arenas, header staging).
  std::shared_ptr<registration_cache> send_memory;
  /// Output buffers peers write results into (connection::place_results), by pages.
  std::shared_ptr<registration_cache> target_memory;
  /// How results are placed: the provider's best, or less if the settings say so.
  placement place_mode = placement::off;

  std::mutex table_mtx; // guards conns (connections open and close on other threads)
  std::vector<std::shared_ptr<connection>> conns; // by index; null: free

  /// Allocates an index for `c`. Throws rw::error(errc::unavailable) when full.
  uint32_t add(std::shared_ptr<connection> c);
  std::shared_ptr<connection> find(uint32_t index);

private:
  /// Injects `n` bytes with immediate `imm` to `dest`, retrying while the provider is
  /// busy, for up to `timeout_ms`.
  bool inject(const void* bytes, size_t n, uint32_t imm, uint64_t dest,
              int timeout_ms) noexcept;

  std::mutex tx_mtx_;
  std::vector<std::byte> recv_bufs_;
  std::unique_ptr<region> recv_region_;
  std::vector<tx_op> recv_ctx_; // contexts of the posted receives
  uint32_t next_index_ = 0;
  uint32_t credits_per_message_ = 1;
};

} // namespace rw::transports::fabric
