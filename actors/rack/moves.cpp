// A job moving between nodes while it trains (a node drained, or one joined), the node's
// side. The cluster coordinator (actors/cluster/move.cpp, for actors/cluster/drain.cpp
// and actors/cluster/join.cpp) drives three phases over every node of the job: fence
// (each node's shards hold the job's pushes, then its chunks settle at a clock boundary,
// a layer-wise tensor's all at one, and freeze; the ones the new ring homes
// elsewhere travel back as chunk files), reshape (each node of the new ring rebuilds its
// part from the chunks it keeps and those moved to it), reroute (workers hear the new
// ring; a node it leaves out lets the job go). Consistent hashing moves only the chunks
// whose home changed; a chunk moves with its parameters, optimizer state and version, so
// the result stays bitwise that of the job unmoved.

#include <algorithm>
#include <functional>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "actors/poller/nic_poller.hpp"
#include "logic/job_plan.hpp"
#include "runtime/checkpoint/chunk_file.hpp"

namespace rw::actors::detail {

namespace {

using runtime::checkpoint::chunk_record;

caf::error no_job(const rack_state& st, uint32_t job_id) {
  return cluster_error(
    errc::unknown_job,
    fmt::format("node {} holds no live job {}: its first worker has not "
                "joined, or it ended",
                st.settings.node_name, job_id));
}

// This node's routes for `job` on the ring of `next` (its index there in `index`), or
// null if `next` leaves it out.
routing_ptr routes_here(const rack_state& st, const job_info& job, const job_layout& next,
                        uint32_t& index) {
  auto at = node_index_in(next, st.settings.node_name);
  if (!at)
    return nullptr;
  index = *at;
  return node_routes(job.spec, next, index, uint32_t(st.shards.size()),
                     st.settings.shard_endpoints);
}

caf::error not_on_ring(const rack_state& st, const job_layout& next) {
  return cluster_error(errc::invalid_spec,
                       fmt::format("node {} is not among the job's new nodes [{}]",
                                   st.settings.node_name, fmt::join(next.nodes, ",")));
}

// Every shard holds the job by `routes`: the node does too, and answers `rp` once its
// pollers check frames by them (the workers hear of the new ring only after every node
// has answered).
void adopt_ring(rack_ptr self, job_info& job, const job_layout& next, routing_ptr routes,
                uint32_t index, caf::typed_response_promise<ok_atom> rp) {
  auto& st = self->state;
  job.routes = routes;
  job.layout = next;
  job.node_index = index;
  job.moving = false;
  if (auto g = st.grants.find(job.spec.name); g != st.grants.end())
    g->second.layout = next;
  tell_pollers(self, route_change{job.id, routes, {}, false},
               [rp]() mutable { rp.deliver(ok_atom::value); });
}

// Every shard has taken the new routes (or `failed` says why not).
void finish_takeover(rack_ptr self, caf::typed_response_promise<ok_atom> rp,
                     uint32_t job_id, const job_layout& next, routing_ptr routes,
                     uint32_t index, uint64_t before, const std::string& failed,
                     std::chrono::steady_clock::time_point started) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr) {
    rp.deliver(no_job(st, job_id));
    return;
  }
  if (!failed.empty()) {
    rp.deliver(cluster_error(errc::internal, failed));
    return;
  }
  spdlog::warn("job taken over: job='{}' id={} nodes=[{}] ring_version={}: {} chunk(s) "
               "homed here, {} of them were replicas of the dead node's; in {} us",
               job->spec.name, job_id, fmt::join(next.nodes, ","), next.ring_version,
               routes->local_chunks(), routes->local_chunks() - before,
               std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::steady_clock::now() - started)
                 .count());
  job->taken_over_at = next.ring_version;
  adopt_ring(self, *job, next, routes, index, rp);
}

// A job this node joins (rw.node_join, its grant says so): live here from now on, with
// no worker yet and no chunk on a shard until the reshape creates them; null if no
// grant says so or `next` leaves the node out.
// The live grant that has this node join job `job_id` (rw.node_join), or null.
grant_info* joining_grant(rack_state& st, uint32_t job_id) {
  for (auto& [name, g] : st.grants)
    if (g.job_id == job_id && g.ended.empty() && g.joining)
      return &g;
  return nullptr;
}

job_info* host_job(rack_ptr self, uint32_t job_id, const job_layout& next) {
  auto& st = self->state;
  auto* g = joining_grant(st, job_id);
  if (g == nullptr || st.jobs.count(g->spec.name) != 0)
    return nullptr;
  job_info job;
  job.id = job_id;
  job.granted = true;
  job.spec = g->spec;
  job.init_rank = g->init_rank;
  job.checkpoint_every = g->checkpoint_every;
  job.checkpoint_dir = g->checkpoint_dir;
  job.routes = routes_here(st, job, next, job.node_index);
  if (!job.routes)
    return nullptr;
  job.layout = next;
  auto n = job.spec.num_workers;
  job.ranks.reset(n);
  job.moving = true;
  job.arriving = true;
  auto name = job.spec.name;
  spdlog::info(
    "job joining: job='{}' id={} nodes=[{}] ring_version={}: node {} takes {} "
    "chunk(s) of it (and {} replica(s)); its workers connect once it is rerouted",
    name, job_id, fmt::join(next.nodes, ","), next.ring_version, st.settings.node_name,
    job.routes->local_chunks(), job.routes->replica_chunks());
  st.names[job_id] = name;
  return &st.jobs.emplace(name, std::move(job)).first->second;
}

// With `kept`, the workers send again only what went to a chunk's former home.
std::vector<std::byte> reroute_payload(const job_layout& l, bool kept = false) {
  protocol::reroute_msg msg{l.ring_version, l.nodes, l.replicas, l.addresses};
  msg.kept_pushes = kept;
  return protocol::encode(msg);
}

} // namespace

void tell_pollers(rack_ptr self, route_change rc, std::function<void()> then) {
  auto& pollers = self->state.pollers;
  auto pending = std::make_shared<size_t>(pollers.size() + 1);
  auto one = [pending, then] {
    if (--*pending == 0)
      then();
  };
  for (auto& p : pollers)
    self
      ->request(caf::actor_cast<nic_poller_actor>(p),
                self->state.settings.shard_setup_timeout, reroute_atom::value, rc)
      .then([one](ok_atom) { one(); },
            [one, job = rc.job_id](caf::error& err) {
              spdlog::warn("job {}: a poller did not take the job's new routes: {}", job,
                           to_string(err));
              one();
            });
  one();
}

caf::result<chunk_moves> on_fence(rack_ptr self, uint32_t job_id,
                                  const job_layout& next) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return no_job(st, job_id);
  if (job->layout.nodes.size() < 2 || is_hierarchical(job->layout) || job->internal)
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}' cannot move: only a flat job on several "
                                     "nodes moves chunk by chunk",
                                     job->spec.name));
  if (job->moving)
    return cluster_error(errc::invalid_spec,
                         fmt::format("job '{}' is moving already", job->spec.name));
  job->moving = true;
  job->staying.clear();
  auto rp = self->make_response_promise<chunk_moves>();
  auto taken = std::make_shared<std::vector<chunk_record>>();
  auto pending = std::make_shared<size_t>(st.shards.size());
  auto failed = std::make_shared<std::string>();
  auto name = job->spec.name;
  auto started = std::chrono::steady_clock::now();
  auto done = [self, rp, taken, failed, job_id, next, name, started]() mutable {
    auto& st = self->state;
    auto* job = live_job(st, job_id);
    if (job == nullptr) {
      rp.deliver(cluster_error(errc::unknown_job,
                               fmt::format("job '{}' ended while it settled", name)));
      return;
    }
    if (!failed->empty()) {
      job->moving = false;
      for (auto& s : st.shards)
        self->send(s, thaw_atom::value, job_id);
      rp.deliver(cluster_error(errc::timeout, *failed));
      return;
    }
    auto split = split_for_move(*taken, job->spec, next, st.settings.node_name);
    job->staying = std::move(split.staying);
    chunk_moves moves;
    std::vector<std::string> where;
    for (auto& [node, chunks] : split.leaving) {
      where.push_back(fmt::format("{} to {}", chunks.size(), node));
      runtime::checkpoint::chunk_file f{name, 0, st.settings.node_name,
                                        std::move(chunks)};
      moves.moves.push_back({node, runtime::checkpoint::encode(f)});
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - started)
                .count();
    spdlog::info("job settled for a move: job='{}' id={}: {} chunk(s) at versions {}..{} "
                 "after {} ms; {} stay, moving [{}]",
                 name, job_id, taken->size(), split.lowest_version, split.highest_version,
                 ms, job->staying.size(), fmt::join(where, ", "));
    rp.deliver(std::move(moves));
  };
  // Second phase: every shard settles its chunks, layer-wise tensors at their targets.
  auto fence_all = [self, job_id, taken, pending, failed, done,
                    name](const settle_targets& targets) mutable {
    auto& st = self->state;
    for (uint32_t i = 0; i < st.shards.size(); ++i)
      self
        ->request(st.shards[i],
                  std::chrono::milliseconds(defaults::move_settle_timeout_ms),
                  fence_atom::value, job_id, targets)
        .then(
          [taken, pending, done](chunk_snapshot& snap) mutable {
            if (snap.chunks)
              for (auto& r : *snap.chunks)
                taken->push_back(std::move(r));
            if (--*pending == 0)
              done();
          },
          [self, i, taken, pending, failed, done, name](caf::error& err) mutable {
            if (failed->empty())
              *failed = fmt::format(
                "job '{}': shard {} of node {} did not settle within {} "
                "ms (is a worker away?): {}; the job goes on where it was",
                name, i, self->state.settings.node_name, defaults::move_settle_timeout_ms,
                describe(self->system(), err));
            if (--*pending == 0)
              done();
          });
  };
  // First phase (within a node request's time, so that both phases end within the
  // cluster coordinator's bound on the settle): every shard holds the job's pushes and
  // says how far each layer-wise tensor got there. A tensor's chunks sit on several
  // shards and its step needs every one's norms: settled chunk by chunk, a push refused
  // on one shard could strand a step begun on another. Nothing is counted while the
  // shards hold, so the highest reach over all of them is where every chunk of the
  // tensor settles.
  auto reach = std::make_shared<settle_targets>();
  auto holding = std::make_shared<size_t>(st.shards.size());
  for (uint32_t i = 0; i < st.shards.size(); ++i)
    self
      ->request(st.shards[i],
                std::chrono::milliseconds(defaults::node_request_timeout_ms),
                hold_atom::value, job_id)
      .then(
        [reach, holding, failed, done, fence_all](settle_targets& r) mutable {
          for (auto& [tensor, v] : r.by_tensor)
            reach->by_tensor[tensor] = std::max(reach->by_tensor[tensor], v);
          if (--*holding > 0)
            return;
          if (failed->empty())
            fence_all(*reach);
          else
            done();
        },
        [self, i, holding, failed, done, name](caf::error& err) mutable {
          if (failed->empty())
            *failed = fmt::format(
              "job '{}': shard {} of node {} could not hold its pushes "
              "for the move: {}; the job goes on where it was",
              name, i, self->state.settings.node_name, describe(self->system(), err));
          if (--*holding == 0)
            done();
        });
  return rp;
}

caf::result<ok_atom> on_reshape(rack_ptr self, uint32_t job_id, const job_layout& next,
                                const chunk_moves& incoming) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    job = host_job(self, job_id, next);
  if (job == nullptr)
    return no_job(st, job_id);
  if (!job->moving)
    return cluster_error(
      errc::invalid_spec,
      fmt::format("job '{}' has not settled for a move here", job->spec.name));
  uint32_t index = 0;
  auto routes = routes_here(st, *job, next, index);
  if (!routes)
    return not_on_ring(st, next);
  chunk_placement placed{routes, st.settings.node_name};
  for (auto& r : job->staying)
    if (auto why = placed.keep(std::move(r)); !why.empty())
      return cluster_error(errc::internal, why);
  for (auto& m : incoming.moves) {
    if (m.node != st.settings.node_name)
      continue;
    std::string why;
    if (auto code = placed.receive(m.file, why); code != errc::ok)
      return cluster_error(code, why);
  }
  if (auto why = placed.check_complete(job->spec.name); !why.empty())
    return cluster_error(errc::internal, why);
  auto arrived = placed.arrived();
  auto per_shard = placed.take();
  job->staying.clear();
  auto rp = self->make_response_promise<ok_atom>();
  auto pending = std::make_shared<size_t>(st.shards.size());
  auto failed = std::make_shared<std::string>();
  auto peers = make_shard_peers(st.shards);
  bool arriving = job->arriving;
  mirror_ring(self, *job, next);
  for (uint32_t i = 0; i < st.shards.size(); ++i) {
    job_setup setup{job_id,
                    job->spec,
                    routes,
                    i,
                    nullptr,
                    peers,
                    nullptr,
                    job->init_rank,
                    std::move(per_shard[i]),
                    job->checkpoint_every};
    setup.ring_version = next.ring_version;
    setup.mirror = job->mirror;
    auto finish = [self, rp, pending, failed, job_id, next, routes, index,
                   arrived]() mutable {
      if (--*pending > 0)
        return;
      auto& st = self->state;
      auto* job = live_job(st, job_id);
      if (job == nullptr) {
        rp.deliver(no_job(st, job_id));
        return;
      }
      if (!failed->empty()) {
        rp.deliver(cluster_error(errc::internal, *failed));
        return;
      }
      spdlog::info("job reshaped: job='{}' id={} nodes=[{}] ring_version={}: {} chunk(s) "
                   "homed here, {} of them moved here",
                   job->spec.name, job_id, fmt::join(next.nodes, ","), next.ring_version,
                   routes->local_chunks(), arrived);
      if (job->arriving) { // joined: hellos are served from now on
        job->arriving = false;
        if (auto g = st.grants.find(job->spec.name); g != st.grants.end())
          g->second.joining = false;
      }
      // Pushes the pollers route by the old table reach shards that drop them (not
      // theirs any more); the workers send them again after the reroute.
      adopt_ring(self, *job, next, routes, index, rp);
    };
    auto sent = arriving ? self->request(st.shards[i], st.settings.shard_setup_timeout,
                                         create_atom::value, std::move(setup),
                                         caf::actor_cast<abort_sink>(self))
                         : self->request(st.shards[i], st.settings.shard_setup_timeout,
                                         reshape_atom::value, std::move(setup));
    std::move(sent).then([finish](ok_atom) mutable { finish(); },
                         [self, i, failed, finish](caf::error& err) mutable {
                           *failed = fmt::format("shard {} of node {} did not take the "
                                                 "moved chunks: {}",
                                                 i, self->state.settings.node_name,
                                                 describe(self->system(), err));
                           finish();
                         });
  }
  return rp;
}

caf::result<ok_atom> on_reroute(rack_ptr self, uint32_t job_id, const job_layout& next) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return no_job(st, job_id);
  bool leaving = std::find(next.nodes.begin(), next.nodes.end(), st.settings.node_name)
                 == next.nodes.end();
  // After a takeover to this ring the shards counted what the ring before routed here:
  // only the dead node's chunks come again (actors/shard/moves.hpp, stale_push).
  bool kept = job->taken_over_at != 0 && job->taken_over_at == next.ring_version;
  tell_pollers(self, route_change{job_id, nullptr, reroute_payload(next, kept), leaving});
  if (leaving)
    let_go(self, job_id,
           fmt::format("its chunks moved to [{}] (ring version {})",
                       fmt::join(next.nodes, ","), next.ring_version));
  return ok_atom::value;
}

caf::result<ok_atom> on_takeover(rack_ptr self, uint32_t job_id, const job_layout& next) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if (job == nullptr)
    return no_job(st, job_id);
  if (job->layout.replicas == 0)
    return cluster_error(
      errc::invalid_spec,
      fmt::format("job '{}' keeps no replicas to take over with", job->spec.name));
  uint32_t index = 0;
  auto routes = routes_here(st, *job, next, index);
  if (!routes)
    return not_on_ring(st, next);
  auto before = job->routes->local_chunks();
  auto rp = self->make_response_promise<ok_atom>();
  auto pending = std::make_shared<size_t>(st.shards.size());
  auto failed = std::make_shared<std::string>();
  auto started = std::chrono::steady_clock::now();
  mirror_ring(self, *job, next);
  for (uint32_t i = 0; i < st.shards.size(); ++i)
    self
      ->request(st.shards[i], st.settings.shard_setup_timeout, takeover_atom::value,
                route_change{job_id, routes, {}, false, next.ring_version})
      .then(
        [=](ok_atom) mutable {
          if (--*pending == 0)
            finish_takeover(self, rp, job_id, next, routes, index, before, *failed,
                            started);
        },
        [=](caf::error& err) mutable {
          *failed = fmt::format("shard {} of node {} could not take over: {}", i,
                                self->state.settings.node_name,
                                describe(self->system(), err));
          if (--*pending == 0)
            finish_takeover(self, rp, job_id, next, routes, index, before, *failed,
                            started);
        });
  return rp;
}

caf::result<ok_atom> on_thaw(rack_ptr self, uint32_t job_id) {
  auto& st = self->state;
  auto* job = live_job(st, job_id);
  if ((job == nullptr && joining_grant(st, job_id) != nullptr)
      || (job != nullptr && job->arriving)) {
    let_go(self, job_id, "the move onto this node was given up");
    return ok_atom::value;
  }
  if (job == nullptr)
    return no_job(st, job_id);
  job->moving = false;
  job->staying.clear();
  for (auto& s : st.shards)
    self->send(s, thaw_atom::value, job_id);
  // Same ring: the workers send again what the settling shards dropped.
  tell_pollers(self, route_change{job_id, nullptr, reroute_payload(job->layout), false});
  spdlog::warn("job move given up: job='{}' id={}: it serves again on [{}]",
               job->spec.name, job_id, fmt::join(job->layout.nodes, ","));
  return ok_atom::value;
}

} // namespace rw::actors::detail
