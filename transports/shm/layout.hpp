#pragma once
// The shared memory segment a colocated worker offers its rack-agg: the format both
// processes map. Everything in it is either plain data written before it is published
// or a lock-free atomic (address-free, so valid across processes).
//
//   header | tensor table | per tensor: gradient region, result region
//
// The worker writes a chunk's gradient into its gradient region, then a `request`
// into `requests` and rings the node's doorbell. A shard reads the gradient in place,
// writes the updated chunk into the worker's result region, then a `completion` into
// `completions` and rings `worker_bell`. A bell costs a futex syscall only when the
// other side said it is about to sleep.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rw::transports::shm {

constexpr uint64_t segment_magic = 0x31465348'4d535752ull; // "RWSMSHF1"
constexpr uint32_t ring_slots = 16384;                     // a power of two
constexpr uint32_t error_slots = 64;
constexpr size_t region_align = 4096;

/// A futex word and a flag saying its owner is (about to be) asleep on it.
struct doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};
};

/// Wakes the owner of `bell` if it sleeps (after the caller published its data).
void ring(doorbell& bell) noexcept;

/// Sleeps on `bell` until rung or `timeout_ms` passed, unless `ready()` says there is
/// work already (checked after announcing the sleep, so no ring is lost).
template <class Ready>
void wait(doorbell& bell, int timeout_ms, Ready ready);

/// Single producer, single consumer ring of trivially copyable T.
template <class T, uint32_t N>
struct spsc_ring {
  static_assert((N & (N - 1)) == 0, "ring size must be a power of two");
  alignas(64) std::atomic<uint64_t> head{0}; // next slot the producer writes
  alignas(64) std::atomic<uint64_t> tail{0}; // next slot the consumer reads
  alignas(64) T slots[N];

  bool push(const T& x) noexcept {
    auto h = head.load(std::memory_order_relaxed);
    if (h - tail.load(std::memory_order_acquire) >= N)
      return false;
    slots[h & (N - 1)] = x;
    head.store(h + 1, std::memory_order_release);
    return true;
  }
  bool pop(T& out) noexcept {
    auto t = tail.load(std::memory_order_relaxed);
    if (t == head.load(std::memory_order_acquire))
      return false;
    out = slots[t & (N - 1)];
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  bool empty() const noexcept {
    return tail.load(std::memory_order_acquire) == head.load(std::memory_order_acquire);
  }
  bool full() const noexcept {
    return head.load(std::memory_order_acquire) - tail.load(std::memory_order_acquire)
           >= N;
  }
};

/// Worker -> node: a chunk is ready (push, init: in the gradient region) or wanted
/// (pull). `kind` and `flags` as in the frame header.
struct request {
  uint16_t kind;
  uint16_t flags;
  uint32_t tensor;
  uint32_t chunk;
  uint32_t reserved;
  uint64_t clock;
};

/// Node -> worker: what happened to a chunk.
struct completion {
  enum kind_t : uint16_t {
    update = 1,    // the result region holds the chunk at version `clock`
    consumed = 2,  // the node is done reading the gradient pushed for `clock`
    error = 3,     // `code`; the message is errors[extra]
    unchanged = 4, // a pull of changes: the chunk is still at version `clock`
    published = 5, // a subscribed chunk reached version `clock` (read it as an update)
  };
  uint16_t kind;
  uint16_t code;
  uint32_t tensor;
  uint32_t chunk;
  uint32_t extra; // update: the staleness served; error: the message's slot
  uint64_t clock;
};

struct error_text {
  char text[248];
};

struct tensor_entry {
  uint64_t elements;
  uint64_t grad_offset; // from the segment's start
  uint64_t result_offset;
};

struct header {
  uint64_t magic;
  uint64_t nonce; // the worker's hello carries it too: proof of the same segment
  uint64_t total_bytes;
  uint32_t num_tensors;
  uint32_t chunk_bytes;
  alignas(64) doorbell worker_bell;
  alignas(64) std::atomic<uint32_t> next_error{0};
  alignas(64) spsc_ring<request, ring_slots> requests;
  alignas(64) spsc_ring<completion, ring_slots> completions;
  error_text errors[error_slots];
  // tensor_entry table[num_tensors] follows at tensor_table_offset()
};

/// The node-wide doorbell every colocated worker rings after posting requests.
struct node_bell_segment {
  uint64_t magic;
  alignas(64) doorbell bell;
};

constexpr size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

constexpr size_t tensor_table_offset() {
  return align_up(sizeof(header), 64);
}

inline tensor_entry* tensor_table(header* h) {
  return reinterpret_cast<tensor_entry*>(reinterpret_cast<std::byte*>(h)
                                         + tensor_table_offset());
}

} // namespace rw::transports::shm

#include "transports/shm/futex.hpp"
