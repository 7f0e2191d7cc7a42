#pragma once
// The writer of the coordinator's state database (actors/cluster/store.hpp): a detached
// actor, so a commit (SQLite, synchronous=FULL: an fsync) never holds the coordinator.
// Under write backlog an fsync took seconds; while it ran on the coordinator's own
// thread no heartbeat was answered and a takeover's request reached the node 3.5 s late
// (bench/RESULTS.md, issue 38).
//
// Protocol:
//   coordinator -> writer  store_write  -> std::string  "" once the write is durable,
//                                                        else why not
// Writes are applied in the order the coordinator sends them (one sender, one
// mailbox). The writer monitors the coordinator and quits when it is gone, after the
// writes sent before (they come first in its mailbox): nothing sent is dropped.

#include <cstdint>
#include <memory>

#include <caf/all.hpp>

#include "actors/cluster/store.hpp"

namespace rw::actors::detail {

/// One write: a job inserted or replaced (with the next job id), the next job id
/// alone, or a job deleted.
struct store_write {
  enum class kind : uint8_t { save_job, save_next_job_id, remove_job };
  kind what = kind::save_job;
  stored_job job;           // save_job
  uint32_t next_job_id = 0; // save_job, save_next_job_id
  uint32_t job_id = 0;      // remove_job
};

} // namespace rw::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::detail::store_write)

namespace rw::actors::detail {

using store_writer_actor =
  caf::typed_actor<caf::replies_to<store_write>::with<std::string>>;

/// Spawns the writer (detached: its own thread) over `store`; it quits once
/// `coordinator` is gone and every write sent before is done.
store_writer_actor spawn_store_writer(caf::actor_system& sys,
                                      std::shared_ptr<cluster_store> store,
                                      const caf::actor_addr& coordinator);

} // namespace rw::actors::detail
