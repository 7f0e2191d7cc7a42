#pragma once
// One worker process of rw-bench comm (the hidden `comm-worker` subcommand): joins the
// job, runs push_pull iterations of deterministic pseudo-random gradients, optionally
// checks each result bitwise against the sum in the job's order, and prints
// "RESULT verified iterations max_staleness t_1 .. t_N" (the timed iterations, ms),
// which the driver and bench/netns*.sh read.

#include "apps/bench/comm_args.hpp"

namespace rw::bench {

/// Returns the process's exit code: 0, 2 (the node refused or failed), 3 (a result
/// was not the exact sum).
int run_worker(const comm_args& a);

} // namespace rw::bench
