#pragma once
// The table given to rw.job_create, read into the job_spec and placement the cluster
// is asked for. Fields (all named; anything else is refused):
//
//   name (string, required)     workers (whole number, required)
//   consistency "bsp" | "ssp:S" | "async"            (default "bsp")
//   optimizer sum|sgd|momentum|nesterov|adam|lamb|lars (default "sum")
//   lr, momentum, beta1, beta2, epsilon, weight_decay, rescale, eta (numbers;
//       defaults those of rw::optimizer_spec)
//   chunk_bytes (whole number, or a size string such as "32KiB"; default
//       rw::defaults::chunk_bytes)
//   node (string: the node to place the job on; absent: the coordinator picks)
//   tensors (a list, in order: {{"w", 1024}, {name = "b", elements = 16, has_init =
//       true}}; absent: the first worker to join declares them)
//
// Only types and forms are checked here (a fractional worker count, an unknown
// optimizer); ranges are the coordinator's to judge. A refusal throws
// std::invalid_argument whose message names the field and what it accepts.

#include <string>

#include "actors/cluster_messages.hpp"
#include "rackweave/job_spec.hpp"

struct lua_State;

namespace rw::shell::detail {

struct create_request {
  job_spec spec; // without tensors (none given): the first worker declares them
  actors::job_placement placement;
};

/// Reads the table at `index` (the argument of rw.job_create).
create_request read_create_request(lua_State* L, int index);

} // namespace rw::shell::detail
