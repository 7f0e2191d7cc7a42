// Fault injection on a node (rw.inject, through the cluster coordinator): a shard
// crashed (its supervisor restarts it with its chunks' state), or a job's worker
// connections closed as a cut link would close them (the workers say hello again).

#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "actors/poller/nic_poller.hpp"

namespace rw::actors::detail {

namespace {

// Closes job `job_id`'s connections of `rank` on every poller; answers how many.
caf::result<std::string> cut_links(rack_ptr self, uint32_t job_id, uint32_t rank,
                                   const std::string& job) {
  auto& st = self->state;
  auto rp = self->make_response_promise<std::string>();
  struct tally {
    uint32_t cut = 0;
    size_t pending = 0;
  };
  auto t = std::make_shared<tally>();
  t->pending = st.pollers.size() + 1;
  auto who = rank == UINT32_MAX ? std::string{"every worker"}
                                : fmt::format("rank {}", rank);
  auto node = st.settings.node_name;
  auto one = [t, rp, who, node, job]() mutable {
    if (--t->pending > 0)
      return;
    spdlog::warn("fault injection: closed {} connection(s) of {} of job '{}'", t->cut,
                 who, job);
    rp.deliver(fmt::format("closed {} connection(s) of {} of job '{}' on node {}", t->cut,
                           who, job, node));
  };
  for (auto& p : st.pollers)
    self
      ->request(caf::actor_cast<nic_poller_actor>(p), st.settings.shard_setup_timeout,
                cut_atom::value, job_id, rank)
      .then(
        [t, one](uint32_t n) mutable {
          t->cut += n;
          one();
        },
        [one](caf::error&) mutable { one(); });
  one();
  return rp;
}

} // namespace

caf::result<std::string> on_inject(rack_ptr self, uint32_t job_id,
                                   const std::string& kill, uint32_t index) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return cluster_error(
      errc::unknown_job,
      fmt::format("node {} holds no live job {}: its first worker has not "
                  "joined, or it ended",
                  st.settings.node_name, job_id));
  auto& job = st.jobs.at(n->second);
  if (kill == "link") {
    if (index != UINT32_MAX && index >= job.spec.num_workers)
      return cluster_error(errc::bad_rank,
                           fmt::format("job '{}' has ranks 0..{}, not {}", n->second,
                                       job.spec.num_workers - 1, index));
    return cut_links(self, job_id, index, n->second);
  }
  if (kill != "shard")
    return cluster_error(
      errc::invalid_spec,
      fmt::format("a node can inject kill = 'shard' or 'link', not '{}'", kill));
  if (index >= st.shards.size())
    return cluster_error(errc::invalid_spec,
                         fmt::format("node {} has shards 0..{}, not {}",
                                     st.settings.node_name, st.shards.size() - 1, index));
  auto why = fmt::format("rw.inject on job '{}'", n->second);
  spdlog::warn("fault injection: crashing shard {} ({})", index, why);
  self->send(st.shards[index], crash_atom::value, why);
  return fmt::format("crashed shard {} of node {}", index, st.settings.node_name);
}

} // namespace rw::actors::detail
