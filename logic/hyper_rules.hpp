#pragma once
// Which jobs' hyper-parameters may change at a clock (rw.job_set, worker::set_hyper),
// judged the same way by the cluster coordinator and, for an open job, by its node.

#include <string>

#include <fmt/format.h>

#include "rackweave/defaults.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/layerwise.hpp"

namespace rw::actors::detail {

/// Why `spec`'s hyper-parameters cannot change during training ("": they can).
inline std::string hyper_unchangeable(const job_spec& spec) {
  if (spec.consistency.model != consistency_spec::bsp)
    return fmt::format(
      "job '{}' runs {}: a change at a clock is exact only under bsp (under "
      "ssp and async a chunk's steps do not wait for every rank)",
      spec.name, to_string(spec.consistency));
  if (runtime::is_layerwise(spec.optimizer.kind))
    return fmt::format("job '{}' uses {}, whose steps span a whole tensor: its "
                       "hyper-parameters cannot change during training yet",
                       spec.name, to_string(spec.optimizer.kind));
  return {};
}

/// Why another change of `spec` cannot be asked for now ("": it can): one is being
/// decided (`pending`), or its schedule holds defaults::max_hyper_changes already. The
/// code to refuse with is too_many_requests.
inline std::string hyper_busy(const job_spec& spec, bool pending) {
  if (pending)
    return fmt::format(
      "a change of job '{}''s hyper-parameters is being decided already: "
      "ask again once it is answered",
      spec.name);
  if (spec.schedule.size() >= defaults::max_hyper_changes)
    return fmt::format("job '{}' has had {} hyper-parameter changes, the most a job may "
                       "have",
                       spec.name, spec.schedule.size());
  return {};
}

} // namespace rw::actors::detail
