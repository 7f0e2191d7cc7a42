#pragma once
// The node's side of a colocated worker's shared memory segment, as a transport
// connection. Receiving: the shm endpoint drains the segment's request ring; a pushed
// chunk reaches the shard as a read-only `view` of the worker's gradient region (no
// copy), and when the shard lets go of it the worker is told the memory is free.
// Sending (from shard threads): an `update` is announced with a completion; the
// worker reads it in the job's shared parameter segment when it maps one, otherwise
// the update is first written into the worker's result region; `error` goes to the error slots; an
// `ack` means nothing here (a push completes when its memory is consumed).
// A completion the ring has no room for (the worker is behind) waits in the
// connection's backlog, in order, and the endpoint's thread moves it into the ring
// when the worker has made room: a sender never waits and nothing is dropped. A
// backlog past its bound, or one the worker took nothing of for the I/O timeout, cuts
// the worker off (the connection closes, with that reason).

#include <chrono>
#include <deque>
#include <mutex>
#include <string>

#include "rackweave/job_spec.hpp"
#include "runtime/chunking.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace rw::transports::shm {

class connection final : public transports::connection,
                         public std::enable_shared_from_this<connection> {
public:
  /// `segment` was checked against `spec` (open_worker_segment); it belongs to worker
  /// `rank` of job `job_id`.
  connection(mapping segment, const job_spec& spec, std::string peer, uint32_t job_id,
             uint32_t rank, bool worker_reads_params);

  uint32_t job_id() const noexcept { return job_id_; }
  uint32_t rank() const noexcept { return rank_; }

  bool send(const protocol::frame_header& h, const iovec* payload, int count) override;
  using transports::connection::send;
  void close() override;
  bool is_open() const noexcept override;
  const std::string& peer() const noexcept override { return peer_; }
  bool resident() const noexcept override { return true; }

  /// Takes the next request, if any (endpoint thread only).
  bool next_request(request& out) noexcept { return header_->requests.pop(out); }
  bool has_requests() const noexcept { return !header_->requests.empty(); }

  /// The chunk's memory in the gradient region, or nullptr if out of range.
  std::byte* gradient(uint32_t tensor, uint32_t chunk, uint32_t& bytes) const noexcept;

  /// Tells the worker the gradient pushed for (tensor, chunk, clock) was consumed.
  void consumed(uint32_t tensor, uint32_t chunk, uint64_t clock) noexcept;

  /// Reported once by the endpoint.
  bool reported = false;

  /// How long the worker may take no completion while some wait, and how many bytes
  /// of completions may wait (the endpoint sets them when it adopts the connection).
  void set_send_limits(std::chrono::milliseconds io_timeout, uint64_t backlog_bytes);

  /// Whether completions wait for room in the ring.
  bool has_backlog() const noexcept { return backlog_.load(std::memory_order_acquire); }
  /// Whether the worker made room for some of them.
  bool backlog_fits() const noexcept {
    return has_backlog() && !header_->completions.full();
  }
  /// Moves what fits of the backlog into the ring (endpoint thread); cuts the worker
  /// off if it took nothing for the I/O timeout.
  void flush_backlog();

  /// Why the node closed it, if it did (for the endpoint's report); errc::ok otherwise.
  std::pair<errc, std::string> close_reason() const;

private:
  // False if the connection is closed, or this completion cut the worker off.
  bool post(const completion& c) noexcept;
  void cut_locked(std::string why) noexcept; // post_mtx_ held

  mapping segment_;
  header* header_;
  size_t planned_bytes_ = 0; // the segment's size as planned (set with tensors_)
  // Where each tensor's regions are, as the node planned them from the job spec (and
  // checked the segment against): never re-read from the segment, which the worker
  // may rewrite at any time.
  std::vector<tensor_entry> tensors_;
  std::vector<runtime::chunk_layout> layouts_;
  std::string peer_;
  uint32_t job_id_;
  uint32_t rank_;
  bool worker_reads_params_;    // updates need no copy: the worker maps the parameters
  mutable std::mutex post_mtx_; // shards on several threads post completions
  std::deque<completion> backlog_list_; // waiting for room in the ring (post_mtx_)
  std::atomic<bool> backlog_{false};
  std::chrono::steady_clock::time_point last_progress_; // the backlog last moved
  std::chrono::milliseconds io_timeout_{defaults::io_timeout_ms};
  uint64_t backlog_limit_ = defaults::send_queue_mib << 20;
  std::string close_reason_; // post_mtx_
  std::atomic<bool> open_{true};
};

/// A pushed chunk as the shard sees it: the worker's gradient, read in place.
class view final : public runtime::payload {
public:
  view(std::shared_ptr<connection> owner, std::byte* data, uint32_t bytes,
       uint32_t tensor, uint32_t chunk, uint64_t clock, bool notify)
    : payload(data, bytes, false), owner_(std::move(owner)), tensor_(tensor),
      chunk_(chunk), clock_(clock), notify_(notify) {
    size = bytes;
  }

private:
  void recycle() noexcept override {
    if (notify_)
      owner_->consumed(tensor_, chunk_, clock_);
    delete this;
  }

  std::shared_ptr<connection> owner_;
  uint32_t tensor_;
  uint32_t chunk_;
  uint64_t clock_;
  bool notify_; // push and init complete on consumption; push_pull on its update
};

} // namespace rw::transports::shm
