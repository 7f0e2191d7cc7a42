#pragma once
// The cluster's reports as Lua tables (the shapes rw's commands return), and the
// totals over a job's ranks that both the tables and rw.watch show.
//
//   node: {id, name, role, endpoints = {...}, shards, jobs, last_seen_ms}
//   job:  {id, name, state, reason, node, endpoints = {...}, workers, consistency,
//          optimizer = {kind, lr, momentum, beta1, beta2, epsilon, weight_decay,
//                       rescale, eta},
//          chunk_bytes, tensors = {{name, elements, has_init}, ...},
//          created_unix_ms, started_unix_ms, ended_unix_ms,
//          ranks = {{rank, state, peer, clock, pushes, pulls, bytes_in, bytes_out,
//                    wait_ms, late_ms, late_last_ms, late_max_ms, late_steps,
//                    waited_ms, missing_chunks}, ...},
//          clock_min, clock_max, pushes, pulls, bytes_in, bytes_out, wait_ms,
//          slowest = {rank, ...}}
//
// Counts are Lua integers; hyper-parameters are the float32 values written as their
// shortest decimal (lr 0.01 reads back as 0.01); wait_ms and the late_*_ms are floats.
// late_ms is how long after the first rank's last chunk of a step this rank's last
// chunk came, the mean of its last 8 steps (BSP; late_last_ms the newest step,
// late_max_ms the largest, late_steps how many were measured); waited_ms and
// missing_chunks: a step that has waited for this rank longer than the node's
// --slow-step-ms, how long, and the chunks of it the rank has not pushed (0: none).
// slowest: the ranks with a late_ms of at least 1 ms, slowest first, at most 3.

#include <cstdint>
#include <string>
#include <vector>

#include "actors/cluster_messages.hpp"

struct lua_State;

namespace rw::shell::detail {

struct job_totals {
  uint64_t clock_min = 0; // over every rank, absent ones included; 0 without ranks
  uint64_t clock_max = 0;
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t wait_us = 0;
};

job_totals totals_of(const actors::job_report& job);

/// The job's slowest ranks (late at least 1 ms a step, or waited for past the slow-step
/// threshold), slowest first, at most `n`.
std::vector<actors::rank_lateness> slowest_ranks(const actors::job_report& job, size_t n);
/// "slowest ranks: 3 (30.2 ms late a step), 1 (1.5 ms); a step waits 1500 ms for rank 3
/// (12 chunks)", or "" when no rank is late.
std::string lateness_text(const actors::job_report& job);

void push_node(lua_State* L, const actors::node_info& node);
void push_job(lua_State* L, const actors::job_report& job);

} // namespace rw::shell::detail
