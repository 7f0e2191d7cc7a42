#pragma once
// Rack coordinator: the node's job registry and routing. It admits workers (hello),
// creates jobs on the shards, and ends them when their workers leave or fail.
//
// Protocol
//   poller -> coordinator  (hello_atom, hello_request) -> job_binding
//                          first hello of a job name creates the job: the coordinator
//                          asks every shard to allocate its chunks (create_atom) and
//                          answers once all have; later hellos must match the spec and
//                          take a free rank. A refused hello gets a binding with an
//                          error code and message (sent to the worker as an error frame).
//   poller -> coordinator  (attach_atom, attach_request) -> job_binding
//                          a joined worker's connection to a further endpoint, proved by
//                          the token its welcome carried
//   poller -> coordinator  (leave_atom, job_id, rank, graceful, reason)
//                          one of a rank's connections closed; the rank has left when
//                          its last connection has. Graceful (bye first): the shards
//                          fail only steps that still need the rank; when the last rank
//                          has left the job ends (drop_atom). Not graceful: the job is
//                          aborted (abort_atom to every shard) and every waiting worker
//                          gets the reason.
//   shard  -> coordinator  (abort_atom, job_id, errc, reason)
//                          a step timed out: the job is aborted as above.
//   supervisor -> coordinator (replace_atom, index, shard)
//                          shard `index` failed and was restarted empty: every job
//                          (each has chunks there) is aborted.

#include <chrono>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/chunk_shard.hpp"
#include "actors/messages.hpp"

namespace rw::actors {

using rack_coordinator_actor = caf::typed_actor<
  caf::replies_to<hello_atom, hello_request>::with<job_binding>,
  caf::replies_to<attach_atom, attach_request>::with<job_binding>,
  caf::reacts_to<leave_atom, uint32_t, uint32_t, bool, std::string>,
  caf::reacts_to<abort_atom, uint32_t, errc, std::string>,
  caf::reacts_to<replace_atom, uint32_t, chunk_shard_actor>>;

struct coordinator_settings {
  std::string node_name;
  uint32_t max_chunk_bytes = defaults::max_chunk_bytes;
  uint32_t max_workers = defaults::max_workers;
  uint64_t max_job_bytes = 0; // parameters + optimizer state of one job
  /// Endpoints serving each shard (runtime::placement); empty: one endpoint.
  std::vector<std::vector<uint32_t>> shard_endpoints;
  /// Keep each job's parameters in a shared segment colocated workers can read.
  bool shared_params = false;
};

rack_coordinator_actor spawn_rack_coordinator(caf::actor_system& sys,
                                              coordinator_settings settings,
                                              std::vector<chunk_shard_actor> shards);

} // namespace rw::actors
