#pragma once
// How a chunk shard is set up by its NUMA supervisor: where it runs, where its chunk
// memory lives, its priority order and its timeouts.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>

#include "rackweave/defaults.hpp"
#include "runtime/memory_registrar.hpp"
#include "runtime/thread_cpu.hpp"
#include "runtime/topology.hpp"

namespace rw::actors {

struct shard_settings {
  uint32_t index = 0;
  std::shared_ptr<const runtime::topology> topo; // null: not pinned
  runtime::core_info core;                       // where to pin (with topo)
  uint32_t numa = 0;                             // where chunk memory lives
  bool priority = true; // answer the waiting worker furthest behind first
  std::chrono::milliseconds step_timeout{defaults::step_timeout_ms};
  std::chrono::milliseconds scan_interval{defaults::timeout_scan_ms};
  /// A step waiting longer than this is named (log, job status); 0: never.
  std::chrono::milliseconds slow_step{defaults::slow_step_ms};
  /// How long a finished job's chunks stay for a checkpoint (0: released at once).
  std::chrono::milliseconds keep_finished{defaults::keep_finished_ms};
  /// Registers a new job's arena with the transports that send from it (the fabric
  /// endpoint's NIC); empty: none does.
  runtime::memory_registrar register_memory;
  /// Where the shard's thread publishes its CPU clock for the node's balancer (null:
  /// nowhere). Kept across restarts: the next thread publishes in the same slot.
  std::shared_ptr<runtime::thread_cpu_slot> cpu_clock;
  /// For tests only (rw-node --test-delay-answers): updates of these tensors (index in
  /// the job, every job) are held this long before they are sent (logic/held_answers).
  std::map<uint32_t, std::chrono::milliseconds> test_answer_delays;
};

} // namespace rw::actors
