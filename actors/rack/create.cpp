// Job creation on the node: a later worker joins a job that has chunks already; the
// first creates it (a hierarchical job's rack part, the chunks laid out over the
// node's shards, the job's links), and is answered with its binding.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "logic/chunk_state.hpp"
#include "logic/job_plan.hpp"
#include "logic/limited_log.hpp"
#include "logic/shard_set.hpp"
#include "runtime/credentials.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"

namespace rw::actors::detail {

namespace {

// A later worker joins a job that has chunks already.
job_binding join_job(rack_ptr self, job_info& job, const hello_request& req) {
  auto& spec = req.hello.spec;
  auto rank = req.hello.rank;
  if (auto diff = describe_mismatch(job.spec, spec); !diff.empty()) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, rank, diff));
    return refuse(errc::spec_mismatch, diff);
  }
  return join_rank(self, job, rank, req.peer);
}

// A hierarchical job's part on this node: its rack's ranks, summed here in rank order
// (the shards' spec: those workers, a plain sum), and the uplink that takes each
// chunk's partial to its home in the top level. Returns the shards' spec.
job_spec rack_part(rack_ptr self, job_info& job, const job_spec& spec) {
  auto& st = self->state;
  auto plan = plan_rack_part(spec, job.layout.rank_racks, job.node_index);
  job.local_rank = std::move(plan.local_rank);
  job.global_rank = std::move(plan.global_rank);
  auto g = st.grants.find(top_job_name(spec.name));
  uplink_settings u;
  u.join.connect = job.layout.addresses.at(job.node_index);
  u.join.job = g->second.spec;
  u.join.job.tensors = spec.tensors;
  u.join.rank = job.node_index;
  u.join.token = g->second.secret;
  u.join.transport = "tcp";
  // Every node of the job already holds the grant: a join that takes longer than this
  // means a node is not answering, and the job fails with that.
  u.join.request_timeout = std::chrono::seconds(10);
  u.join.connect_timeout = std::chrono::seconds(5);
  u.rack_job_id = job.id;
  u.rack_routes = job.routes;
  u.shards = st.shards;
  u.coordinator = caf::actor_cast<abort_sink>(self);
  u.node_name = st.settings.node_name;
  job.uplink = std::make_shared<rack_uplink>(std::move(u));
  spdlog::info("job '{}' id={}: rack part of a hierarchical job: ranks [{}] of {} summed "
               "here, then each chunk's partial goes to its home in '{}' as rack {}",
               spec.name, job.id, fmt::join(job.global_rank, ","), spec.num_workers,
               top_job_name(spec.name), job.node_index);
  return plan.spec;
}

// A job on this node alone, which the in-node balancer may widen later, is served by
// one shard per settings.job_bytes_per_shard of its parameters, the least loaded
// (logic/shard_set.hpp); any other keeps every shard. Says which, for the job's line.
std::string choose_shards(const rack_state& st, job_info& job) {
  auto n = st.shards.size();
  if (st.settings.job_bytes_per_shard == 0)
    return fmt::format("all {}", n);
  if (job.layout.nodes.size() > 1 || is_hierarchical(job.layout)
      || runtime::is_layerwise(job.spec.optimizer.kind))
    return fmt::format("all {} (on several nodes, hierarchical or layer-wise: not "
                       "narrowed, the balancer could not widen it)",
                       n);
  std::vector<uint64_t> load(n, 0);
  for (auto& [name, other] : st.jobs)
    if (other.routes && other.id != job.id)
      add_load(*other.routes, load);
  auto set = narrow_job(*job.routes, st.settings.job_bytes_per_shard,
                        st.settings.shard_endpoints, load);
  if (set.moves.empty())
    return set.why;
  job.routes = job.routes->remapped(set.moves);
  return set.why
         + (st.settings.balance_interval.count() > 0
              ? "; the balancer widens it when busy"
              : "; --no-balance: it stays so");
}

// The first worker of a job: the shards allocate its chunks, then the worker joins.
void create_rack_job(rack_ptr self, const hello_request& req, uint32_t id,
                     binding_promise rp) {
  auto& st = self->state;
  auto& spec = req.hello.spec;
  auto rank = req.hello.rank;
  job_info job;
  job.id = id;
  job.granted = id < open_job_ids;
  job.spec = spec;
  if (auto g = st.grants.find(spec.name); job.granted && g != st.grants.end()) {
    job.layout = g->second.layout;
    job.internal = g->second.internal;
    // Hyper-parameter changes made before (a job restarted from its checkpoint after a
    // node died keeps its schedule): the worker states the job as created.
    job.spec.schedule = g->second.spec.schedule;
    job.init_rank = g->second.init_rank;
    if (!is_hierarchical(g->second.layout)) { // a rack part holds no state of its own
      job.checkpoint_every = g->second.checkpoint_every;
      job.checkpoint_dir = g->second.checkpoint_dir;
    }
    job.node_index = node_index_in(job.layout, st.settings.node_name)
                       .value_or(static_cast<uint32_t>(job.layout.nodes.size()));
  }
  job.routes = node_routes(spec, job.layout, job.node_index, uint32_t(st.shards.size()),
                           st.settings.shard_endpoints);
  auto shards_why = choose_shards(st, job);
  std::vector<std::vector<runtime::checkpoint::chunk_record>> restored;
  if (auto g = st.grants.find(spec.name);
      job.granted && g != st.grants.end() && !g->second.restore.empty()) {
    auto why = load_restore(g->second.restore, spec, *job.routes, restored);
    if (!why.empty()) {
      spdlog::error("{}", why);
      rp.deliver(refuse(errc::invalid_spec, why));
      return;
    }
    if (is_hierarchical(job.layout))
      drop_optimizer_state(restored); // the top level's, at the chunks' homes
    spdlog::info("job '{}' id={}: restoring {} chunks homed here from checkpoint '{}'",
                 spec.name, id, job.routes->local_chunks(), g->second.restore);
  }
  job.ranks.reset(spec.num_workers);
  job.ranks.join(rank, req.peer, runtime::random_u64());
  job.created_by = peer_host(req.peer);
  if (st.settings.shared_params && job.layout.nodes.size() <= 1) {
    try {
      job.params = std::make_shared<transports::shm::mapping>(
        transports::shm::create_params_segment(spec));
    } catch (const std::exception& e) {
      spdlog::warn("job '{}': parameters stay private (colocated workers get copies): {}",
                   spec.name, e.what());
    }
  }
  auto shard_spec = job.spec;
  if (is_hierarchical(job.layout))
    shard_spec = rack_part(self, job, spec);
  uint64_t bytes = 0;
  for (auto& t : spec.tensors)
    bytes += t.elements * sizeof(float);
  // An open job is created here; a granted one was created at the cluster coordinator
  // (its log says by whom), and its first worker starts this node's part.
  spdlog::info(
    "{}: job='{}' id={} workers={} consistency={} compression={}{} "
    "optimizer={} lr={} "
    "chunk_bytes={} tensors={} bytes={} chunks={} shards={} chunks_per_shard=[{}] "
    "chunks_per_endpoint=[{}] credentials={} nodes={} homed_here={}",
    job.granted ? "job started on this node" : "job created", spec.name, job.id,
    spec.num_workers, to_string(spec.consistency), to_string(spec.compression),
    spec.compression.updates ? "+updates" : "", to_string(spec.optimizer.kind),
    spec.optimizer.learning_rate, spec.chunk_bytes, spec.tensors.size(), bytes,
    job.routes->total_chunks(), shards_why,
    fmt::join(job.routes->chunks_per_shard(), ","),
    fmt::join(job.routes->chunks_per_endpoint(), ","),
    job.granted ? "token" : "none (open job)",
    std::max<size_t>(job.layout.nodes.size(), 1), job.routes->local_chunks());
  spdlog::info("worker joined: job='{}' id={} rank={} peer={}", spec.name, job.id, rank,
               req.peer);
  // Created by this hello only for an open job: a granted one was created by whoever
  // asked the coordinator for it (a shell), its first worker only starts it.
  auto b = joined(job, rank, !job.granted);
  auto sink = caf::actor_cast<abort_sink>(self);
  auto pending = std::make_shared<size_t>(st.shards.size());
  auto peers = make_shard_peers(st.shards);
  mirror_ring(self, job, job.layout);
  for (uint32_t i = 0; i < st.shards.size(); ++i) {
    job_setup setup{job.id,
                    shard_spec,
                    job.routes,
                    i,
                    job.params,
                    peers,
                    job.uplink,
                    job.init_rank,
                    restored.empty() ? std::vector<runtime::checkpoint::chunk_record>{}
                                     : std::move(restored[i]),
                    job.checkpoint_every};
    setup.ring_version = job.layout.nodes.size() > 1 ? job.layout.ring_version : 0;
    setup.mirror = job.mirror;
    self
      ->request(st.shards[i], st.settings.shard_setup_timeout, create_atom::value,
                std::move(setup), sink)
      .then(
        [=](ok_atom) mutable {
          if (--*pending == 0 && rp.pending())
            answer_with_resume(self, b, rp); // 0, or a restored job's clock
        },
        [=](caf::error& err) mutable {
          // The job ends here, on every shard: its name is free and no rank stays live.
          auto why = fmt::format(
            "shard {} of node {} did not set up the job's chunks: {}", i,
            self->state.settings.node_name, describe(self->system(), err));
          end_job(self, b.job_id, "failed", errc::internal, why);
          if (rp.pending())
            rp.deliver(refuse(errc::internal, why));
        });
  }
  if (job.uplink)
    job.uplink->start();
  if (job.granted)
    report_start(self, job);
  st.names[job.id] = spec.name;
  st.jobs.emplace(spec.name, std::move(job));
}

} // namespace

void admit(rack_ptr self, const hello_request& req, uint32_t id, binding_promise rp) {
  auto& st = self->state;
  auto it = st.jobs.find(req.hello.spec.name);
  if (it != st.jobs.end()) {
    answer_with_resume(self, join_job(self, it->second, req), std::move(rp));
    return;
  }
  create_rack_job(self, req, id != 0 ? id : st.next_open_id++, std::move(rp));
}

} // namespace rw::actors::detail
