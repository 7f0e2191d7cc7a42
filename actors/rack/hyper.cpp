// Hyper-parameter changes at a clock, on a node: the cluster coordinator prepares a
// change on every node of the job (here: on every shard, whose steps of clocks at or
// past at_clock then wait) and learns the highest version any chunk reached; if none
// had run the step of at_clock it commits the change everywhere, else drops it. A
// prepared change nobody ends within hyper_hold is dropped here by itself, so a lost
// coordinator cannot stall the job.
#include <chrono>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "logic/hyper_rules.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

constexpr auto hyper_hold = std::chrono::seconds(30);
// How long one request of a change may take: the cluster's two rounds, or this node's.
constexpr auto hyper_timeout = std::chrono::milliseconds(defaults::hyper_timeout_ms);

struct gather {
  size_t waiting = 0;
  uint64_t highest = 0;
  std::string failure;
};

} // namespace

caf::result<uint64_t> on_hyper_prepare(rack_ptr self, uint32_t job_id, uint64_t id,
                                       const hyper_change& change) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return cluster_error(errc::unknown_job,
                         fmt::format("job {} is not running on node {} (no worker has "
                                     "joined it here yet, or it ended)",
                                     job_id, st.settings.node_name));
  if (job->uplink || job->moving || job->arriving)
    return cluster_error(
      errc::unavailable,
      fmt::format("job '{}' on node {} is {}: its hyper-parameters cannot "
                  "change now",
                  job->spec.name, st.settings.node_name,
                  job->uplink ? "a hierarchical job's rack part"
                              : "moving between nodes"));
  if (auto why = validate(change); !why.empty())
    return cluster_error(errc::invalid_spec, why);
  st.hyper[id] = {job_id, change};
  auto rp = self->make_response_promise<uint64_t>();
  auto g = std::make_shared<gather>();
  g->waiting = st.shards.size();
  for (auto& s : st.shards)
    self->request(s, std::chrono::seconds(10), hyper_atom::value, job_id, id, change)
      .then(
        [g, rp](uint64_t highest) mutable {
          g->highest = std::max(g->highest, highest);
          if (--g->waiting == 0) {
            if (g->failure.empty())
              rp.deliver(g->highest);
            else
              rp.deliver(cluster_error(errc::unavailable, g->failure));
          }
        },
        [self, g, rp](caf::error& err) mutable {
          g->failure = "a shard did not prepare the change: "
                       + self->system().render(err);
          if (--g->waiting == 0)
            rp.deliver(cluster_error(errc::unavailable, g->failure));
        });
  caf::delayed_anon_send(caf::actor_cast<rack_coordinator_actor>(self), hyper_hold,
                         hyper_atom::value, job_id, id, false);
  spdlog::info(
    "hyper-parameters: job='{}' id={}: change {} ({}) prepared: steps of clock "
    ">= {} wait for the decision",
    job->spec.name, job_id, id, describe(change), change.at_clock);
  return rp;
}

caf::result<ok_atom> on_hyper_end(rack_ptr self, uint32_t job_id, uint64_t id,
                                  bool apply) {
  auto& st = self->state;
  auto it = st.hyper.find(id);
  if (it == st.hyper.end() || it->second.job_id != job_id) {
    if (!apply)
      return ok_atom::value; // dropped already (it timed out, or the job ended)
    return cluster_error(
      errc::unavailable,
      fmt::format("hyper-parameter change {} of job {} is not prepared on "
                  "node {} (it waited longer than {} s and was dropped)",
                  id, job_id, st.settings.node_name, hyper_hold.count()));
  }
  auto change = it->second.change;
  st.hyper.erase(it);
  for (auto& s : st.shards)
    self->send(s, hyper_atom::value, job_id, id, apply);
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return ok_atom::value;
  if (apply) {
    job->spec.schedule.push_back(change); // so shards set up later (moves) have it
    spdlog::info("hyper-parameters: job='{}' id={}: {} from now on", job->spec.name,
                 job_id, describe(change));
  } else {
    spdlog::warn("hyper-parameters: job='{}' id={}: change {} ({}) dropped",
                 job->spec.name, job_id, id, describe(change));
  }
  return ok_atom::value;
}

caf::result<uint64_t> on_hyper_request(rack_ptr self, uint32_t job_id,
                                       const hyper_change& change) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return cluster_error(
      errc::unknown_job,
      fmt::format("job {} is not running on node {}", job_id, st.settings.node_name));
  // One change at a time per job, and a bounded schedule: a rank 0 looping changes
  // cannot keep the cluster coordinator (which also takes the heartbeats) busy.
  if (auto why = hyper_busy(job->spec, job->hyper_pending); !why.empty())
    return cluster_error(errc::too_many_requests, why);
  auto settled = [self, job_id] {
    if (auto* j = live_job(self->state, job_id))
      j->hyper_pending = false;
  };
  if (job->granted) {
    if (!st.link)
      return cluster_error(
        errc::unavailable,
        fmt::format("node {} is not in touch with the cluster coordinator, "
                    "which changes job '{}' on every node",
                    st.settings.node_name, job->spec.name));
    job->hyper_pending = true;
    auto rp = self->make_response_promise<uint64_t>();
    self->request(st.link, hyper_timeout, hyper_atom::value, job->spec.name, change)
      .then(
        [rp, settled](uint64_t reached) mutable {
          settled();
          rp.deliver(reached);
        },
        [rp, settled](caf::error& err) mutable {
          settled();
          rp.deliver(std::move(err));
        });
    return rp;
  }
  // An open job lives on this node alone: the same two rounds, over its shards.
  if (auto why = hyper_unchangeable(job->spec); !why.empty())
    return cluster_error(errc::invalid_spec, why);
  job->hyper_pending = true;
  auto id = runtime::random_u64();
  auto rp = self->make_response_promise<uint64_t>();
  auto me = caf::actor_cast<rack_coordinator_actor>(self);
  self->request(me, hyper_timeout, hyper_atom::value, job_id, id, change)
    .then(
      [self, me, rp, job_id, id, change, settled](uint64_t reached) mutable {
        bool apply = reached <= change.at_clock;
        self->request(me, hyper_timeout, hyper_atom::value, job_id, id, apply)
          .then(
            [rp, apply, reached, change, settled](ok_atom) mutable {
              settled();
              if (apply)
                rp.deliver(reached);
              else
                rp.deliver(cluster_error(
                  errc::clock_out_of_range,
                  fmt::format(
                    "the job has run the step of clock {} already (it is at clock "
                    "{}): at_clock must be >= {}",
                    change.at_clock, reached, reached)));
            },
            [rp, settled](caf::error& err) mutable {
              settled();
              rp.deliver(std::move(err));
            });
      },
      [me, rp, job_id, id, settled](caf::error& err) mutable {
        settled();
        caf::anon_send(me, hyper_atom::value, job_id, id, false);
        rp.deliver(std::move(err));
      });
  return rp;
}

} // namespace rw::actors::detail
