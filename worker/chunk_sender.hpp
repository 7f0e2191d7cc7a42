#pragma once
// Sending one operation's chunks (the proxy's thread): frames straight from the
// caller's memory, in gather writes of up to 64 frames per connection, or requests in
// the shared-memory segment. The frame each operation travels in is
// protocol::frame_for's.
//
// The push window: with `window` (chunks; 0: none), chunk c goes out only once c -
// window chunks of the operation are answered, so a worker that got ahead of the others
// (whose pushes of the same chunks its answers wait for) leaves the links to them. At
// such a point run() flushes what it holds and returns `paused`, having asked the link
// to call link_events::answered once the chunks before it are answered; the proxy
// calls run() again then, or after max_window_wait with unpace() (a straggler, or
// workers sending their operations in another order: the rest goes out unpaced). The
// proxy's actor never waits in a handler.

#include <chrono>
#include <cstdint>
#include <vector>

#include "protocol/frame.hpp"
#include "worker/link.hpp"
#include "worker/proxy.hpp"

namespace rw::actors {

/// Which chunks to send (by chunk index); empty: every chunk.
using chunk_filter = std::vector<bool>;

/// The longest a paused operation waits for its window to move before it goes on
/// unpaced.
constexpr std::chrono::milliseconds max_window_wait{200};

class chunk_sender {
public:
  enum result {
    sent,   // every chunk is on its way
    paused, // at the window: run() again when the link says so (or unpace() first)
    failed, // a connection failed (the link reports the close)
  };

  /// Operation `op` (kept by the caller while this runs) on `tensor`, its frames
  /// carrying `clock`; `seq` is the operation's armed sequence number (for the window).
  chunk_sender(worker_link& link, uint32_t tensor, const worker_op& op, uint64_t clock,
               chunk_filter only = {}, uint64_t seq = 0, uint32_t window = 0);

  /// Sends from where the last run stopped: to the end, or to the next pause.
  result run();
  /// The rest goes out unpaced.
  void unpace() noexcept { window_ = 0; }

private:
  result post_all(); // shared memory
  void flush(size_t conn);
  iovec pack(uint32_t chunk, const float* values, protocol::frame_header& h);

  worker_link& link_;
  uint32_t tensor_;
  const worker_op& op_;
  uint64_t clock_;
  chunk_filter only_;
  uint64_t seq_;
  uint32_t window_;
  uint32_t window_step_;
  uint32_t next_ = 0; // the next chunk to send
  bool failed_ = false;
  uint16_t half_ = 0; // bf16 / fp16 pushes: the flag their packed chunks carry
  // Sparse: each chunk's pairs, or the dense chunk where that is smaller.
  std::vector<std::vector<protocol::sparse_pair>> pairs_;
  std::vector<std::vector<float>> dense_;
  // This run's gather writes, per connection.
  struct pending {
    std::vector<protocol::frame_header> headers;
    std::vector<iovec> payloads;
  };
  std::vector<pending> per_conn_;
  std::shared_ptr<const worker_link::conn_list> conns_;
};

} // namespace rw::actors
