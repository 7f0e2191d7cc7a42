#pragma once
// Which jobs' hyper-parameters may change at a clock (rw.job_set, worker::set_hyper),
// judged the same way by the cluster coordinator and, for an open job, by its node.

#include <string>

#include <fmt/format.h>

#include "rackweave/job_spec.hpp"
#include "runtime/layerwise.hpp"

namespace rw::actors::detail {

/// Why `spec`'s hyper-parameters cannot change during training ("": they can).
inline std::string hyper_unchangeable(const job_spec& spec) {
  if (spec.consistency.model != consistency_spec::bsp)
    return fmt::format("job '{}' runs {}: a change at a clock is exact only under bsp (under "
                       "ssp and async a chunk's steps do not wait for every rank)",
                       spec.name, to_string(spec.consistency));
  if (runtime::is_layerwise(spec.optimizer.kind))
    return fmt::format("job '{}' uses {}, whose steps span a whole tensor: its "
                       "hyper-parameters cannot change during training yet",
                       spec.name, to_string(spec.optimizer.kind));
  return {};
}

} // namespace rw::actors::detail
