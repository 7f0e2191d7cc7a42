#pragma once
// How an idle CAF scheduler thread waits, for every actor system RackWeave starts (a
// node, a worker, the shell, the Python cluster client, rw-bench's cluster jobs).
//
// CAF 0.17's work-stealing scheduler polls its queue when it runs dry: 100 attempts at
// once, then 500 more with a 50 us sleep between them, and only then sleeps on a
// condition variable (which an enqueue signals at once). A worker sends a few messages
// per step, so its scheduler threads never get past the second phase: up to 20,000
// wake-ups a second per thread, taken from the training loop on the same cores. With no
// 50 us phase an idle thread goes from the quick polls straight to the condition
// variable. Measured on the 2-core machine: the BSP integration test (150 worker
// processes, 63 jobs) took 25-27 s of user and 29-33 s of system CPU, and takes 18-19
// and 21-22; the W=4 x 64 MiB peers cell is unchanged within its noise
// (bench/RESULTS.md, "Idle scheduler threads").

#include <caf/actor_system_config.hpp>

namespace rw::actors {

/// Sets `cfg`'s idle polling as above (before the actor system is made from it).
void configure_idle_policy(caf::actor_system_config& cfg);

} // namespace rw::actors
