#pragma once
// Hyper-parameter changes at a clock, on a shard (rw.job_set, rackweave.set_hyper): a
// change is first prepared (from then on no chunk of the job here runs the step of a
// clock at or past its at_clock), then committed into the job's schedule or dropped;
// either way the steps held meanwhile run. The node's coordinator prepares on every
// shard, and commits only if no chunk had run the step of at_clock yet, so every chunk
// of the job runs the same optimizer for every clock (actors/rack/hyper.cpp).

#include <cstdint>

#include "actors/shard/job.hpp"

namespace rw::actors::detail {

/// Holds the job's steps of clock >= change.at_clock; returns the highest version of
/// the job's chunks here (0 with none): the change is too late if it exceeds at_clock.
uint64_t prepare_hyper(shard_job& job, uint64_t id, const hyper_change& change);

/// Commits (apply) or drops the prepared change `id`; false if none was pending.
bool end_hyper(shard_job& job, uint64_t id, bool apply);

/// The lowest clock whose steps wait for a prepared change (UINT64_MAX: none).
uint64_t held_from(const shard_job& job);

/// The optimizer the step of clock `clock` runs (the job's schedule applied).
inline optimizer_spec optimizer_for(const shard_job& job, uint64_t clock) {
  return job.spec.schedule.empty() ? job.spec.optimizer : optimizer_at(job.spec, clock);
}

} // namespace rw::actors::detail
