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
//                    wait_ms}, ...},
//          clock_min, clock_max, pushes, pulls, bytes_in, bytes_out, wait_ms}
//
// Counts are Lua integers; hyper-parameters are the float32 values written as their
// shortest decimal (lr 0.01 reads back as 0.01); wait_ms is a float.

#include <cstdint>
#include <string>

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

void push_node(lua_State* L, const actors::node_info& node);
void push_job(lua_State* L, const actors::job_report& job);

} // namespace rw::shell::detail
