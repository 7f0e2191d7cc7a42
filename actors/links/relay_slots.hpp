#pragma once
// Where a rack's uplink (rack_uplink.hpp) receives each chunk's answer from the chunk's
// home in a hierarchical job: into the relay buffer of the partial it has in flight,
// for the one version that partial asks for, once. The buffer is the rack shard's: after
// the answer it becomes the rack part's parameters (the shard swaps it in), and later
// the next step's partial. So any other update of the chunk (a repeat, a version not
// asked for, an answer to a partial no longer in flight) must land nowhere: written
// into that buffer it would change the rack's parameters or the sum on its way to the
// home, and the job would end not bitwise the reference.
//
// Plain bookkeeping, one slot per chunk of the job (its job-wide number); not locked:
// the uplink calls it under its mutex (the shards' threads expect, the receiver thread
// looks and takes).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rw::actors {

class relay_slots {
public:
  explicit relay_slots(size_t chunks) : buffers_(chunks, nullptr), awaited_(chunks, 0) {}

  /// A partial of chunk `seq` is on its way to the home; the answer, the chunk's
  /// `version`, is to land in `buffer`.
  void expect(size_t seq, float* buffer, uint64_t version) noexcept {
    buffers_[seq] = buffer;
    awaited_[seq] = version;
  }
  /// Where an update of chunk `seq` at `version` lands: the buffer of the partial in
  /// flight if this is the answer it waits for, else nullptr (not asked for: drop it).
  float* target(size_t seq, uint64_t version) const noexcept {
    return buffers_[seq] != nullptr && awaited_[seq] == version ? buffers_[seq] : nullptr;
  }
  /// The answer has landed: its buffer, and the slot is empty again (a repeat of the
  /// answer finds no target).
  float* take(size_t seq) noexcept {
    auto* b = buffers_[seq];
    buffers_[seq] = nullptr;
    return b;
  }
  /// Why an update of chunk `seq` was not asked for (for the log).
  std::string why_not(size_t seq) const {
    if (buffers_[seq] == nullptr)
      return "no partial of it is on its way";
    return "its partial in flight asks for version " + std::to_string(awaited_[seq]);
  }

private:
  std::vector<float*> buffers_;
  std::vector<uint64_t> awaited_;
};

} // namespace rw::actors
