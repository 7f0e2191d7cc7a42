#pragma once
// The `rw` Lua module: the cluster as the shell's scripts see it. install_rw puts a
// global table `rw` (also package.loaded.rw, so require "rw" works) into a lua_State,
// bound to a cluster_api. Each rw.X is a C function that makes one or more cluster_api
// calls and returns plain Lua tables:
//
//   rw.nodes()                 -> { {id, name, role, endpoints = {...}, shards, jobs,
//                                    last_seen_ms}, ... }
//   rw.jobs()                  -> { job, ... }   (job tables, creation order)
//   rw.job_create{name =, workers =, ...}  -> job table plus `token`
//   rw.job_status(name) / rw.job_stop(name) -> job table;  rw.job_delete(name) -> true
//   rw.job_set{name=, at_clock=, lr=, ...} -> the clock the job had reached
//   rw.wait(name, condition [, {interval =, timeout =}]) -> job table once it holds
//   rw.watch(name [, {interval =, seconds =}])           -> the last job table
//   rw.sleep(seconds), rw.coordinator(), rw.show(value), rw.help()
//
// rw.wait's condition is a state the job must have reached ("created"; "running",
// also met by a job that ran and has ended since; "finished", "stopped", "failed";
// "ended" = any of those three), a number n (every rank joined and at clock >= n) or
// a function(job) -> boolean. It polls job_status every interval (0.2 s) for at most
// timeout (600 s); a job that has ended without meeting the condition fails the wait
// at once, naming its state and reason (an ended job does not change any more).
// rw.watch refreshes every interval (1 s) until the job ends or `seconds` passed:
// redrawn in place on a terminal, one line per refresh otherwise.
//
// Any failure — shell_error from the cluster (its message as is; rw.wait and rw.watch
// put their name first), a bad argument, an unknown rw.X — is raised as a Lua error
// whose message says what went wrong, after the caller's chunk:line; no C++ exception
// ever crosses into Lua. `api` must outlive every use of the module in `L`.

#include <cstdio>

#include "apps/shell/cluster_api.hpp"

struct lua_State;

namespace rw::shell {

struct rw_options {
  /// Ctrl-C stops rw.wait / rw.watch / rw.sleep (back to the prompt) instead of
  /// killing the process.
  bool interactive = false;
  /// Where rw.help, rw.show and rw.watch write.
  FILE* out = stdout;
};

void install_rw(lua_State* L, cluster_api& api, rw_options opts = {});

} // namespace rw::shell
