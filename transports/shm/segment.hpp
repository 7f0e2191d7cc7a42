#pragma once
// Creating, opening and checking shared memory segments: memfds sealed against
// shrinking and growing, which other processes open as /proc/PID/fd/N.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/job_spec.hpp"
#include "transports/shm/layout.hpp"

namespace rw::transports::shm {

/// Mapped shared memory; unmapped on destruction. Its creator's name for it stays until
/// unlink().
class mapping {
public:
  /// Creates anonymous memory of `bytes` (a memfd, zeroed, every page reserved) sealed
  /// against shrinking and growing: whoever maps it can never be killed by a SIGBUS
  /// for a page its creator took away. Named /proc/PID/fd/N (this process, the memfd)
  /// until unlink() closes it: another process of the same user opens it by that name
  /// only meanwhile. Throws std::runtime_error.
  static mapping create_sealed(const char* label, size_t bytes);
  /// Maps another process's sealed memory by its /proc/PID/fd/N name (`what` names
  /// it in errors). Refuses any other name, and memory not sealed against shrinking.
  /// Throws std::runtime_error saying why.
  static mapping open_sealed(const std::string& name, const std::string& what,
                             bool read_only = false);
  /// Maps sealed memory this process received as a descriptor (a handover; it takes
  /// `fd` and closes it), with the same checks as open_sealed. Throws
  /// std::runtime_error saying why.
  static mapping adopt_sealed(int fd, const std::string& what, bool read_only = false);

  mapping() = default;
  mapping(mapping&& other) noexcept;
  mapping& operator=(mapping&& other) noexcept;
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping();

  /// Ends the name (the memory lives on while mapped): nobody opens it any more.
  void unlink() noexcept;

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  template <class T>
  T* as() const noexcept {
    return reinterpret_cast<T*>(data_);
  }

private:
  std::string name_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1; // create_sealed's memfd, open until unlink()
};

/// Where each tensor's regions go in a worker segment for `spec`.
std::vector<tensor_entry> plan_regions(const job_spec& spec, size_t& total_bytes);

/// Creates and initialises a worker's segment for `spec`: sealed memory
/// (mapping::create_sealed), so the node that maps it survives whatever the worker does
/// to it; its name goes in the hello, and unlink() once welcomed ends that name.
mapping create_worker_segment(const job_spec& spec, uint64_t nonce);

/// Opens a worker's segment (only sealed memory by its /proc/PID/fd/N name: a segment
/// the worker could truncate under the node would kill the node) and checks it is the
/// one its hello described (magic, nonce, size, the region of every tensor). Throws
/// std::runtime_error saying why not.
mapping open_worker_segment(const std::string& name, uint64_t nonce,
                            const job_spec& spec);

/// Where each tensor's parameters start in a job's parameter segment (page-aligned),
/// and the segment's size.
std::vector<uint64_t> plan_params(const job_spec& spec, size_t& total_bytes);

/// Creates a job's parameter segment: the node keeps the job's parameters in it, and
/// colocated workers map it read-only to read results without a copy. Sealed memory
/// (mapping::create_sealed), named /proc/PID/fd/N while the job lives; workers get it
/// through the node's handover (transports/shm/handover.hpp), never by that name.
mapping create_params_segment(const job_spec& spec);

/// Maps a job's parameter segment read-only (worker side, the descriptor the node
/// handed over; taken and closed), checking its seals and size.
mapping adopt_params_segment(int fd, const job_spec& spec);

/// Removes RackWeave segments in /dev/shm whose creating process is gone (a node or
/// worker of an older version killed before it could clean up; segments are sealed
/// memfds now, gone with their process). Returns how many were removed.
int remove_stale_segments();

/// Creates the node-wide doorbell segment colocated workers ring (sealed memory).
mapping create_node_bell();

/// Maps the node's doorbell segment (worker side, the descriptor the node handed over;
/// taken and closed). Throws std::runtime_error.
mapping adopt_node_bell(int fd);

} // namespace rw::transports::shm
