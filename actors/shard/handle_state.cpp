// A chunk's optimizer state, as a worker reads it (to save it with its model) and rank 0
// loads it (to resume from what it saved): the `state` frames of protocol/frame.hpp.
//
// A read answers one array (m, then v, as the optimizer keeps them) or the version
// alone, between steps of a BSP job: its clock is the chunk's version, and a worker that
// reads after its own pushes were answered gets every chunk at one clock. A load goes
// into a chunk at version 0 (a new job, after rank 0's init) or at the state's clock (a
// load sent again): each array, then the version, which becomes the saved clock (the
// steps Adam's bias correction counts). Not for SSP or async jobs (their chunks are at
// no one clock), nor for a hierarchical job's rack part (the state is at the top level);
// a job with replicas is read, not loaded (its replicas would not have the state).

#include "actors/shard/handlers.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/shard/job.hpp"
#include "logic/chunk_state.hpp"

namespace rw::actors::shard_impl {

namespace {

// Why job `job` cannot serve `r` at all (none if it can).
shard_refusal refusal(const shard_job& job, const state_request& r) {
  if (job.spec.consistency.model != consistency_spec::bsp)
    return {
      errc::invalid_spec,
      fmt::format("job '{}' is {}: its chunks are at no one clock, so its optimizer "
                  "state is read and loaded in BSP jobs only",
                  job.spec.name, to_string(job.spec.consistency))};
  if (job.relay)
    return {errc::invalid_spec,
            fmt::format("job '{}' is hierarchical: this node holds a rack's part of it "
                        "and the optimizer state is at the job's top level",
                        job.spec.name)};
  if (r.load && job.mirror)
    return {errc::invalid_spec,
            fmt::format("job '{}' keeps replicas of its chunks on other nodes: a loaded "
                        "state would not reach them (create it with replicas = 0 to load "
                        "one)",
                        job.spec.name)};
  if (r.load && r.rank != job.init_rank)
    return {errc::bad_rank,
            fmt::format("only rank {} loads the optimizer state (this is rank {})",
                        job.init_rank, r.rank)};
  return {};
}

} // namespace

void on_state(shard_core& self, state_request& r) {
  auto hdr = about(r.job_id, r.rank, r.tensor, r.chunk, r.clock);
  hdr.kind = frame_kind::state;
  hdr.staleness = r.array;
  hdr.ring = r.tag; // which call of the worker's this answers
  auto* job = find_job(self, r.conn, hdr);
  if (job == nullptr)
    return;
  auto refuse = [&](errc code, const std::string& why) {
    r.conn->send_error(code,
                       fmt::format("{} of the optimizer state of chunk {}/{} refused: {}",
                                   r.load ? "load" : "read", r.tensor, r.chunk, why),
                       hdr);
  };
  if (auto no = refusal(*job, r)) {
    refuse(no.code, no.why);
    return;
  }
  if (job->settling || job->holding || job->awaits(r.tensor, r.chunk)
      || !job->routes->is_owned(r.tensor, r.chunk)) {
    refuse(errc::unavailable, "the chunk is moving (a drain or a rebalance): ask again "
                              "once it has");
    return;
  }
  auto& cs = job->chunks[job->routes->local_index(r.tensor, r.chunk)];
  const bool version_only = r.array == protocol::state_version_only;
  if (!version_only && r.array >= cs.state_arrays()) {
    refuse(errc::bad_chunk,
           fmt::format("the optimizer ({}) keeps {} arrays per element, there is no "
                       "array {}",
                       to_string(job->spec.optimizer.kind), cs.state_arrays(), r.array));
    return;
  }
  if (!r.load) {
    if (cs.layerwise_pending() || cs.mirror_pending() || cs.relay_pending()) {
      refuse(errc::clock_out_of_range,
             fmt::format("its step to version {} is half done: read between steps",
                         cs.version() + 1));
      return;
    }
    auto answer = hdr;
    answer.clock = cs.version();
    if (version_only) {
      r.conn->send(answer);
      return;
    }
    answer.payload_bytes = cs.length() * static_cast<uint32_t>(sizeof(float));
    iovec iov{const_cast<float*>(cs.state_array(r.array)), answer.payload_bytes};
    r.conn->send(answer, &iov, 1);
    return;
  }
  if (auto why = cs.cannot_load(r.clock); !why.empty()) {
    refuse(errc::clock_out_of_range, why);
    return;
  }
  if (version_only) {
    if (cs.version() != r.clock) {
      const auto from = cs.version();
      cs.load_version(r.clock);
      job->steps_done += r.clock - from; // the job's clock counts the loaded steps
      spdlog::debug("shard {}: job {}: chunk {}/{} loaded at clock {}",
                    self.state.settings.index, r.job_id, r.tensor, r.chunk, r.clock);
    }
  } else {
    cs.load_array(r.array, r.payload->floats());
  }
  r.conn->send(hdr); // the answer: done
  if (version_only)  // pulls waiting for the versions up to the clock are answered
    answer_ready(self.state, r.job_id, *job, r.tensor, r.chunk, cs);
}

} // namespace rw::actors::shard_impl
