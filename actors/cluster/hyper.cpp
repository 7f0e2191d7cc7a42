// rw.job_set: a hyper-parameter change at a clock for every chunk of a job, on all of
// its nodes or on none. Two rounds over the job's nodes (actors/rack/hyper.cpp): each
// prepares it (its shards hold every step of a clock >= at_clock) and says the highest
// version its chunks reached; if one had run the step of at_clock, or a node did not
// answer, the change is dropped everywhere, else committed everywhere. Under BSP no step
// of a clock runs before every rank pushed it, so every chunk runs each clock's step
// with the same hyper-parameters, whatever the timing.
#include <algorithm>

#include <caf/all.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/ask.hpp"
#include "actors/cluster/state.hpp"
#include "logic/hyper_rules.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

// Why the job's hyper-parameters cannot change at all ("": they can).
std::string cannot_change(const job_entry& j) {
  auto& spec = j.report.spec;
  if (is_ended(j.report.state))
    return fmt::format("job '{}' has {}", spec.name, j.report.state);
  if (j.report.state != "running")
    return fmt::format("job '{}' has not started (no worker has joined it yet): its "
                       "hyper-parameters are the ones it was created with until then",
                       spec.name);
  if (auto why = hyper_unchangeable(spec); !why.empty())
    return why;
  if (j.report.layout.reduction == "hierarchical")
    return fmt::format(
      "job '{}' is hierarchical: its hyper-parameters cannot change during "
      "training yet",
      spec.name);
  return {};
}

// Ends change `change_id` of job `id` on `nodes`, committed or dropped; then `done`.
template <class Done>
void end_change(cluster_ptr self, const std::vector<uint32_t>& nodes, uint32_t id,
                uint64_t change_id, bool apply, Done done) {
  ask_each<ok_atom>(
    self, nodes, self->state.settings.node_request_timeout,
    apply ? "did not commit the change" : "did not drop the change",
    [done](auto&, std::vector<std::string>& failures) mutable { done(failures); },
    hyper_atom::value, id, change_id, apply);
}

} // namespace

caf::result<uint64_t> set_hyper(cluster_ptr self, const std::string& name,
                                const hyper_change& change) {
  auto& st = self->state;
  auto n = st.by_name.find(name);
  if (n == st.by_name.end())
    return cluster_error(errc::unknown_job, fmt::format("no job named '{}'", name));
  auto id = n->second;
  auto& j = st.jobs.at(id);
  if (auto why = validate(change); !why.empty())
    return cluster_error(errc::invalid_spec, "rw.job_set: " + why);
  if (auto why = cannot_change(j); !why.empty())
    return cluster_error(errc::invalid_spec, why);
  if (auto why = hyper_busy(j.report.spec, j.hyper_pending); !why.empty())
    return cluster_error(errc::too_many_requests, why);
  std::vector<uint32_t> nodes;
  for (auto node : j.node_ids)
    if (st.nodes.count(node) != 0)
      nodes.push_back(node);
  if (nodes.empty())
    return cluster_error(errc::unavailable,
                         fmt::format("no node of job '{}' is live", name));
  auto change_id = runtime::random_u64();
  auto rp = self->make_response_promise<uint64_t>();
  // One change at a time per job: a rank 0 looping changes waits for each decision.
  j.hyper_pending = true;
  auto settled = [self, id] {
    if (auto it = self->state.jobs.find(id); it != self->state.jobs.end())
      it->second.hyper_pending = false;
  };
  ask_each<uint64_t>(
    self, nodes, st.settings.node_request_timeout, "did not prepare the change",
    [self, rp, nodes, id, name, change, change_id, settled](
      std::map<uint32_t, uint64_t>& highest, std::vector<std::string>& failures) mutable {
      uint64_t reached = 0;
      for (auto& [node, v] : highest)
        reached = std::max(reached, v);
      std::string refusal;
      errc code = errc::ok;
      if (!failures.empty()) {
        code = errc::unavailable;
        refusal = fmt::format("job '{}': the change was dropped: {}", name,
                              fmt::join(failures, "; "));
      } else if (reached > change.at_clock) {
        code = errc::clock_out_of_range;
        refusal = fmt::format(
          "job '{}' has run the step of clock {} already (it is at clock "
          "{}): at_clock must be >= {}",
          name, change.at_clock, reached, reached);
      }
      if (code != errc::ok) {
        spdlog::warn("job set refused: job='{}': {}", name, refusal);
        end_change(self, nodes, id, change_id, false,
                   [rp, code, refusal, settled](std::vector<std::string>&) mutable {
                     settled();
                     rp.deliver(cluster_error(code, refusal));
                   });
        return;
      }
      end_change(self, nodes, id, change_id, true,
                 [self, rp, id, name, change, reached,
                  settled](std::vector<std::string>& failed) mutable {
                   settled();
                   if (!failed.empty()) {
                     auto why = fmt::format(
                       "job '{}': the change {} was committed on some "
                       "nodes only: {}",
                       name, describe(change), fmt::join(failed, "; "));
                     spdlog::error("job set: {}", why);
                     rp.deliver(cluster_error(errc::internal, why));
                     return;
                   }
                   auto it = self->state.jobs.find(id);
                   if (it != self->state.jobs.end()) {
                     it->second.report.spec.schedule.push_back(change);
                     save_job(self, id);
                   }
                   spdlog::info("job set: job='{}' id={}: {} (the job was at clock {})",
                                name, id, describe(change), reached);
                   deliver_when_recorded(self, rp, reached);
                 });
    },
    hyper_atom::value, id, change_id, change);
  return rp;
}

} // namespace rw::actors::detail
