#pragma once
// The worker's side of its shared memory segment: it creates the segment (offered in
// its hello), posts requests and drains completions. Used by one proxy thread (post)
// and one receiver thread (drain) at a time.

#include <cstdint>
#include <string>

#include "rackweave/job_spec.hpp"
#include "transports/shm/handover.hpp"
#include "transports/shm/segment.hpp"

namespace rw::transports::shm {

class worker_channel {
public:
  /// Creates a segment for `spec`. Throws std::runtime_error (no /dev/shm, no room).
  explicit worker_channel(const job_spec& spec);

  const std::string& name() const noexcept { return segment_.name(); }
  uint64_t nonce() const noexcept { return nonce_; }

  /// Collects the node's doorbell and, if the node shares them, the job's parameters
  /// from the node's handover (`address` and `ticket` from the welcome; see
  /// handover.hpp), maps them, then removes the segment's name: the node has it
  /// mapped, and nobody else can open it any more. Throws std::runtime_error.
  void connect(const std::string& address, const std::string& ticket,
               const job_spec& spec);

  float* gradient(uint32_t tensor) const noexcept;
  /// Where updates of `tensor` can be read: the node's shared parameters, or this
  /// segment's result region when the node keeps its parameters private.
  const float* result(uint32_t tensor) const noexcept;

  /// Posts a request; false if the ring is full (the node is behind).
  bool post(const request& r) noexcept { return header_->requests.push(r); }
  /// Wakes the node if it sleeps.
  void ring_node() noexcept;

  bool next_completion(completion& out) noexcept { return header_->completions.pop(out); }
  /// Sleeps until the node posts a completion or `timeout_ms` passes.
  void wait(int timeout_ms);
  /// Ends a wait of this process's receiver now (another of its threads needs it to
  /// look elsewhere: an answer over TCP).
  void wake() noexcept;
  std::string error_text(uint32_t slot) const;

private:
  uint64_t nonce_;
  mapping segment_;
  header* header_;
  mapping bell_;
  mapping params_;
  std::vector<uint64_t> param_offsets_;
};

} // namespace rw::transports::shm
