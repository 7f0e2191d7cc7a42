#pragma once
// The CPU time of another thread of this process, read without disturbing it.
//
// A thread publishes its CPU-time clock (pthread_getcpuclockid) in a slot; any thread of
// the process then reads that clock with clock_gettime, a syscall that neither stops
// nor queues behind the thread. The in-node balancer reads its shards' threads so:
// asking a busy shard by message put the question behind every push in its mailbox,
// and the answers that came late were the busy shard's (a round with one missing was
// no sample, so under load the balancer saw too few samples in a row to ever move).
//
// A slot outlives its threads: a restarted shard's new thread publishes in the same
// slot. A thread withdraws its clock when it ends (withdraw with the token publish gave:
// an ending thread never withdraws its successor's clock).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace rw::runtime {

class thread_cpu_slot {
public:
  /// Publishes the calling thread's CPU clock; the token withdraw takes. Throws
  /// std::system_error if the thread has no CPU clock.
  uint32_t publish_this_thread();

  /// The publishing thread is ending: the slot is empty again, unless a thread published
  /// since (`token` is no longer the last publish's).
  void withdraw(uint32_t token);

  /// The CPU time (user + system, in ns) the last thread to publish has used; none if no
  /// thread has published, it withdrew, or it is gone.
  std::optional<uint64_t> read_ns() const;

private:
  // The publish count (high 32 bits) and the clockid (low 32 bits); clockid -1: empty.
  std::atomic<uint64_t> packed_{empty(0)};

  static uint64_t empty(uint32_t generation);
};

/// The calling thread's CPU time (user + system, in ns); 0 if it cannot be read.
uint64_t this_thread_cpu_ns();

/// Names the calling thread (cut to the OS's 15 characters) so that top -H, perf and
/// /proc/PID/task/TID/comm tell a node's threads apart: rw-shard-3, rw-poll-1, ...
void name_this_thread(const std::string& name);

} // namespace rw::runtime
