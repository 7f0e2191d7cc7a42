#include "logic/limited_log.hpp"
#include "actors/rack/rack_coordinator.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/chunk_state.hpp"
#include "actors/rack/state.hpp"
#include "runtime/credentials.hpp"
#include "runtime/kernels.hpp"
#include "runtime/ring.hpp"

namespace rw::actors {

namespace detail {

job_binding refuse(errc code, std::string message) {
  job_binding b;
  b.code = code;
  b.message = std::move(message);
  return b;
}

} // namespace detail

namespace {

using namespace detail;

// Attaches one welcome admits (a worker makes one per further endpoint of the node,
// again after a lost connection): what bounds the nonces kept against replays.
constexpr size_t max_attaches_per_welcome = 4096;

// The host part of a peer's "HOST:PORT".
std::string host_of(const std::string& peer) {
  return peer.substr(0, peer.rfind(':'));
}

// A hello that states no spec (Hello.specFromJob) gets the job's: the running job's
// on this node, else its grant's with the tensors the worker declares (a job created
// without tensors: the first worker declares them). Tensors the worker declares for a
// job that has them must be the same. Returns the refusal, or nothing.
std::optional<job_binding> resolve_spec(rack_ptr self, hello_request& req) {
  auto& h = req.hello;
  if (!h.spec_from_job)
    return std::nullopt;
  auto& st = self->state;
  auto name = h.spec.name;
  auto declared = std::move(h.spec.tensors);
  if (auto j = st.jobs.find(name); j != st.jobs.end()) {
    h.spec = j->second.spec;
  } else if (auto g = st.grants.find(name); g != st.grants.end() && g->second.ended.empty()) {
    h.spec = g->second.spec;
    if (h.spec.tensors.empty())
      h.spec.tensors = declared;
  } else {
    auto why = fmt::format("no job named '{}' on node {}: a worker that states no spec joins "
                           "a job created through the cluster (rw.job_create, "
                           "rackweave.create_job) or already running here",
                           name, st.settings.node_name);
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, h.rank, why));
    return refuse(errc::unknown_job, why);
  }
  if (h.spec.tensors.empty()) {
    auto why = fmt::format("job '{}' has no tensors yet: the first worker to join declares "
                           "them (worker_options.job.tensors; Python: tensors=...)", name);
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, h.rank, why));
    return refuse(errc::invalid_spec, why);
  }
  if (!declared.empty()) {
    auto theirs = h.spec;
    theirs.tensors = std::move(declared);
    if (auto diff = describe_mismatch(h.spec, theirs); !diff.empty()) {
      log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, h.rank, diff));
      return refuse(errc::spec_mismatch, diff);
    }
  }
  return std::nullopt;
}

// Checks a hello on its own: a valid spec, a rank inside it, a size the node allows.
// Returns the refusal, or nothing.
std::optional<job_binding> check_hello(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  auto& spec = req.hello.spec;
  auto rank = req.hello.rank;
  if (auto why = validate(spec, st.settings.max_chunk_bytes, st.settings.max_workers);
      !why.empty()) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}': invalid job spec: {}",
                fmt::format("hello refused: peer={} job='{}': invalid job spec: {}", req.peer,
                 spec.name, why));
    return refuse(errc::invalid_spec, "invalid job spec: " + why);
  }
  if (rank >= spec.num_workers) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}': rank {} outside 0..{}",
                fmt::format("hello refused: peer={} job='{}': rank {} outside 0..{}", req.peer,
                 spec.name, rank, spec.num_workers - 1));
    return refuse(errc::bad_rank, fmt::format("rank {} is outside 0..{}", rank,
                                              spec.num_workers - 1));
  }
  // Parameters and optimizer state, each chunk's arrays on cache lines, and each
  // chunk's bookkeeping on its shard (a job of many small chunks costs more than its
  // floats).
  uint64_t footprint = 0;
  const uint64_t arrays = 1 + runtime::state_arrays(spec.optimizer.kind);
  for (auto& t : spec.tensors) {
    runtime::chunk_layout layout{t.elements, spec.chunk_bytes};
    const uint64_t full = (uint64_t{layout.chunk_elems} * sizeof(float) + 63) / 64 * 64;
    const uint64_t count = layout.count();
    const uint64_t last = (uint64_t{layout.length(layout.count() - 1)} * sizeof(float) + 63)
                          / 64 * 64;
    footprint += arrays * ((count - 1) * full + last) + count * sizeof(detail::chunk_state);
  }
  // A job created with `memory` (a tenant's reservation) may take no more than that.
  uint64_t limit = st.settings.max_job_bytes;
  std::string source = "this node allows {} MiB per job (--max-job-mib)";
  if (auto g = st.grants.find(spec.name);
      g != st.grants.end() && g->second.max_memory != 0 && g->second.max_memory < limit) {
    limit = g->second.max_memory;
    source = "the job was created with memory = {} MiB (rw.job_create): create it with more";
  }
  if (footprint > limit) {
    auto why = fmt::format("job '{}' needs {} MiB of node memory for parameters, "
                           "optimizer state and per-chunk bookkeeping; {}",
                           spec.name, footprint >> 20,
                           fmt::format(fmt::runtime(source), limit >> 20));
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={}: {}",
                fmt::format("hello refused: peer={}: {}", req.peer, why));
    return refuse(errc::invalid_spec, why);
  }
  return std::nullopt;
}

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
  job.local_rank.assign(spec.num_workers, no_rank);
  for (uint32_t r = 0; r < spec.num_workers; ++r)
    if (job.layout.rank_racks.at(r) == job.node_index) {
      job.local_rank[r] = static_cast<uint32_t>(job.global_rank.size());
      job.global_rank.push_back(r);
    }
  auto part = spec;
  part.num_workers = static_cast<uint32_t>(job.global_rank.size());
  part.optimizer = optimizer_spec{};
  part.optimizer.kind = optimizer_kind::sum; // never run: the step ends at the home
  part.optimizer.rescale = 1.0f;
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
  return part;
}

// The first worker of a job: the shards allocate its chunks, then the worker joins.
void create_rack_job(rack_ptr self, const hello_request& req, uint32_t id, binding_promise rp) {
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
    auto& nodes = job.layout.nodes;
    job.node_index = static_cast<uint32_t>(
      std::find(nodes.begin(), nodes.end(), st.settings.node_name) - nodes.begin());
  }
  if (job.layout.nodes.size() > 1 && !is_hierarchical(job.layout)) {
    runtime::hash_ring ring{job.layout.nodes, job.layout.vnodes, job.layout.ring_version};
    job.routes = std::make_shared<runtime::routing_table>(
      spec, uint32_t(st.shards.size()), st.settings.shard_endpoints, &ring, job.node_index,
      job.layout.replicas);
  } else {
    job.routes = std::make_shared<runtime::routing_table>(spec, uint32_t(st.shards.size()),
                                                         st.settings.shard_endpoints);
  }
  std::vector<std::vector<runtime::checkpoint::chunk_record>> restored;
  if (auto g = st.grants.find(spec.name);
      job.granted && g != st.grants.end() && !g->second.restore.empty()) {
    auto why = load_restore(g->second.restore, spec, *job.routes, restored);
    if (!why.empty()) {
      spdlog::error("{}", why);
      rp.deliver(refuse(errc::invalid_spec, why));
      return;
    }
    if (is_hierarchical(job.layout)) {
      // A rack's part holds every chunk's parameters at the checkpoint's version (for
      // its workers' pulls, and to go on from that clock), not the optimizer's state,
      // which is its top level's, at the chunks' homes.
      for (auto& shard : restored)
        for (auto& r : shard) {
          r.m.clear();
          r.v.clear();
        }
    }
    spdlog::info("job '{}' id={}: restoring {} chunks homed here from checkpoint '{}'",
                 spec.name, id, job.routes->local_chunks(), g->second.restore);
  }
  job.ranks.assign(spec.num_workers, rank_status::absent);
  job.ranks[rank] = rank_status::live;
  job.connections.assign(spec.num_workers, 0);
  job.connections[rank] = 1;
  job.tokens.assign(spec.num_workers, 0);
  job.tokens[rank] = runtime::random_u64();
  job.peers.assign(spec.num_workers, std::string{});
  job.peers[rank] = req.peer;
  job.created_by = host_of(req.peer);
  job.departures.assign(spec.num_workers, 0);
  job.away_since.assign(spec.num_workers, {});
  job.away_reason.assign(spec.num_workers, std::string{});
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
  spdlog::info("{}: job='{}' id={} workers={} consistency={} compression={}{} "
               "optimizer={} lr={} "
               "chunk_bytes={} tensors={} bytes={} chunks={} chunks_per_shard=[{}] "
               "chunks_per_endpoint=[{}] credentials={} nodes={} homed_here={}",
               job.granted ? "job started on this node" : "job created", spec.name, job.id,
               spec.num_workers, to_string(spec.consistency),
               to_string(spec.compression), spec.compression.updates ? "+updates" : "",
               to_string(spec.optimizer.kind), spec.optimizer.learning_rate,
               spec.chunk_bytes, spec.tensors.size(), bytes, job.routes->total_chunks(),
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
  std::vector<caf::actor> peers;
  for (auto& sh : st.shards)
    peers.push_back(caf::actor_cast<caf::actor>(sh));
  mirror_ring(self, job, job.layout);
  for (uint32_t i = 0; i < st.shards.size(); ++i) {
    job_setup setup{job.id, shard_spec, job.routes, i, job.params, peers, job.uplink,
                    job.init_rank, restored.empty() ? std::vector<runtime::checkpoint::chunk_record>{}
                                                    : std::move(restored[i]),
                    job.checkpoint_every};
    setup.ring_version = job.layout.nodes.size() > 1 ? job.layout.ring_version : 0;
    setup.mirror = job.mirror;
    self->request(st.shards[i], st.settings.shard_setup_timeout, create_atom::value,
                  std::move(setup), sink)
      .then(
        [=](ok_atom) mutable {
          if (--*pending == 0 && rp.pending())
            answer_with_resume(self, b, rp); // 0, or a restored job's clock
        },
        [=](caf::error& err) mutable {
          // The job ends here, on every shard: its name is free and no rank stays live.
          auto why = fmt::format("shard {} of node {} did not set up the job's chunks: {}", i,
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

namespace detail {

void admit(rack_ptr self, const hello_request& req, uint32_t id, binding_promise rp) {
  auto& st = self->state;
  auto it = st.jobs.find(req.hello.spec.name);
  if (it != st.jobs.end()) {
    answer_with_resume(self, join_job(self, it->second, req), std::move(rp));
    return;
  }
  create_rack_job(self, req, id != 0 ? id : st.next_open_id++, std::move(rp));
}

} // namespace detail

namespace {

// A hello that would create an open job: refused if the workers of its host created
// as many live open jobs here as a host may.
std::optional<job_binding> check_open_job_quota(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  auto limit = st.settings.max_open_jobs_per_peer;
  if (limit == 0 || st.jobs.count(req.hello.spec.name) > 0)
    return std::nullopt;
  auto host = host_of(req.peer);
  std::vector<std::string> theirs;
  for (auto& [name, job] : st.jobs)
    if (!job.granted && job.created_by == host)
      theirs.push_back(name);
  if (theirs.size() < limit)
    return std::nullopt;
  auto why = fmt::format("host {} has created {} live jobs on node {} already (at most {}, "
                         "--max-open-jobs-per-peer): finish or stop one of [{}] first",
                         host, theirs.size(), st.settings.node_name, limit,
                         fmt::join(theirs, ", "));
  log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}' rank={}: {}",
                fmt::format("hello refused: peer={} job='{}' rank={}: {}", req.peer, req.hello.spec.name,
               req.hello.rank, why));
  return refuse(errc::too_many_requests, why);
}

caf::result<job_binding> on_hello(rack_ptr self, hello_request& req) {
  auto& st = self->state;
  if (req.hello.mirror)
    return mirror_hello(self, req);
  if (auto refused = resolve_spec(self, req))
    return *refused;
  if (auto refused = check_hello(self, req))
    return *refused;
  auto& spec = req.hello.spec;
  auto g = st.grants.find(spec.name);
  if (g == st.grants.end()) {
    if (st.settings.open_jobs) {
      if (auto refused = check_open_job_quota(self, req))
        return *refused;
      auto rp = self->make_response_promise<job_binding>();
      admit(self, req, 0, rp);
      return rp;
    }
    return send_on(self, req,
                   refuse(errc::unknown_job,
                          fmt::format("no job named '{}' on node {}: create it first "
                                      "(rw-shell: rw.job_create{{name='{}', ...}}) and "
                                      "start its workers with the token that returns",
                                      spec.name, st.settings.node_name, spec.name)));
  }
  auto& grant = g->second;
  if (!grant.ended.empty()) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}' rank={}: the job has ended here ({})",
                fmt::format("hello refused: peer={} job='{}' rank={}: the job has ended here ({})", req.peer, spec.name, req.hello.rank, grant.ended));
    // It may live on elsewhere (started again from a checkpoint on other nodes): the
    // cluster says where, else the worker hears why it ended here.
    return send_on(self, req, refuse(errc::unknown_job,
                  fmt::format("job '{}' has ended ({}{}{}); create a new job to train "
                              "again",
                              spec.name, grant.ended, grant.reason.empty() ? "" : ": ",
                              grant.reason)));
  }
  auto asked = grant.spec;
  if (asked.tensors.empty())
    asked.tensors = spec.tensors; // the grant leaves the tensors to the workers
  if (auto diff = describe_mismatch(asked, spec); !diff.empty()) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, req.hello.rank, diff));
    return refuse(errc::spec_mismatch, diff);
  }
  if (grant.joining && st.jobs.count(spec.name) == 0) {
    auto why = fmt::format("job '{}' is moving onto node {} (rw.node_join) and is not served "
                           "here until its chunks arrive; say hello to one of its nodes [{}]",
                           spec.name, st.settings.node_name,
                           fmt::join(grant.layout.addresses, ","));
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, req.hello.rank, why));
    return refuse(errc::unavailable, why);
  }
  if (auto elsewhere = place_hello(self, grant, req))
    return *elsewhere;
  if (!req.hello.has_token) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}' rank={}: no token",
                fmt::format("hello refused: peer={} job='{}' rank={}: no token", req.peer, spec.name,
                 req.hello.rank));
    return refuse(errc::unauthorized,
                  fmt::format("job '{}' needs its token: give the worker the token "
                              "rw.job_create returned (worker_options.token)",
                              spec.name));
  }
  job_binding b;
  b.job_id = grant.job_id;
  b.challenge = runtime::make_nonce();
  return b;
}

caf::result<job_binding> on_proof(rack_ptr self, proof_request& p) {
  auto& st = self->state;
  if (p.hello.hello.mirror)
    return mirror_proof(self, p);
  auto& req = p.hello;
  if (auto refused = resolve_spec(self, req)) // the job may have started since the hello
    return *refused;
  auto& spec = req.hello.spec;
  auto g = st.grants.find(spec.name);
  if (g == st.grants.end() || !g->second.ended.empty())
    return refuse(errc::unknown_job,
                  fmt::format("job '{}' ended while the worker was proving its token",
                              spec.name));
  if (!runtime::verify(g->second.secret, p.nonce, spec.name, req.hello.rank, p.mac)) {
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} job='{}' id={} rank={}: wrong token",
                fmt::format("hello refused: peer={} job='{}' id={} rank={}: wrong token", req.peer,
                 spec.name, g->second.job_id, req.hello.rank));
    return refuse(errc::unauthorized,
                  fmt::format("wrong token for job '{}': the proof does not match",
                              spec.name));
  }
  auto rp = self->make_response_promise<job_binding>();
  if (placed_at_join(g->second))
    bind_then_admit(self, req, g->second.job_id, rp);
  else if (auto* parent = unmapped_parent(st, g->second))
    parent->held_top.push_back(held_join{req, g->second.job_id, rp});
  else
    admit(self, req, g->second.job_id, rp);
  return rp;
}

job_binding on_attach(rack_ptr self, const attach_request& req) {
  auto& st = self->state;
  auto n = st.names.find(req.job_id);
  if (n == st.names.end())
    return refuse(errc::unknown_job, fmt::format("unknown job {}", req.job_id));
  auto& job = st.jobs.at(n->second);
  if (req.rank >= job.ranks.size() || job.ranks[req.rank] != rank_status::live) {
    spdlog::warn("attach refused: peer={} job={} rank={}: no such live rank", req.peer,
                 req.job_id, req.rank);
    return refuse(errc::bad_rank, fmt::format("attach refused: job {} has no live rank {}",
                                              req.job_id, req.rank));
  }
  std::string token; // an open job has none: its proofs are keyed by the attach token
  if (job.granted) {
    auto g = st.grants.find(job.spec.name);
    if (g == st.grants.end() || g->second.secret.empty()) {
      spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: the job's grant (its "
                   "token) is gone from this node",
                   req.peer, job.spec.name, req.job_id, req.rank);
      return refuse(errc::unauthorized,
                    fmt::format("attach refused: job '{}' has no token on node {} any more",
                                job.spec.name, st.settings.node_name));
    }
    token = g->second.secret;
  }
  auto attach_token = job.tokens[req.rank];
  if (!runtime::verify_attach(token, attach_token, req.nonce, job.spec.name, req.rank,
                              req.mac)) {
    spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: wrong proof", req.peer,
                 job.spec.name, req.job_id, req.rank);
    return refuse(errc::unauthorized,
                  fmt::format("attach refused: the proof for rank {} of job '{}' does not "
                              "match (the job's token, and the attach token of the rank's "
                              "newest welcome)",
                              req.rank, job.spec.name));
  }
  if (job.attached.size() < job.ranks.size())
    job.attached.resize(job.ranks.size());
  auto& used = job.attached[req.rank];
  if (used.token != attach_token)
    used = {attach_token, {}};
  if (used.seen.size() >= max_attaches_per_welcome) {
    spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: {} attaches since its "
                 "welcome",
                 req.peer, job.spec.name, req.job_id, req.rank, used.seen.size());
    return refuse(errc::too_many_requests,
                  fmt::format("attach refused: rank {} attached {} times since its welcome "
                              "(at most {}): say hello again",
                              req.rank, used.seen.size(), max_attaches_per_welcome));
  }
  if (!used.seen.insert(req.nonce).second) {
    spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: a proof that was used "
                 "already (a replay)",
                 req.peer, job.spec.name, req.job_id, req.rank);
    return refuse(errc::unauthorized,
                  fmt::format("attach refused: this proof for rank {} of job '{}' was used "
                              "already",
                              req.rank, job.spec.name));
  }
  ++job.connections[req.rank];
  spdlog::debug("worker attached: job='{}' id={} rank={} peer={}", job.spec.name, job.id,
                req.rank, req.peer);
  return joined(job, req.rank, false);
}

void on_replace(rack_ptr self, uint32_t index, chunk_shard_actor& shard) {
  auto& st = self->state;
  if (index >= st.shards.size())
    return;
  st.shards[index] = std::move(shard);
  for (auto& [name, job] : st.jobs)
    if (job.mirror)
      job.mirror->set_shard(index, st.shards[index]);
  auto retries = std::move(st.on_shard_replaced[index]);
  st.on_shard_replaced.erase(index);
  for (auto& retry : retries)
    retry();
  auto aborts = std::move(st.checkpoint_aborts);
  st.checkpoint_aborts.clear();
  for (auto& [hook, abort] : aborts)
    abort(fmt::format("shard {} of node {} crashed while the checkpoint waited for its "
                      "chunks; the job goes on: take the checkpoint again",
                      index, st.settings.node_name));
  // The successor holds the chunks' state and fails (abort_atom) only the jobs whose
  // state may be lost; the pollers have the workers re-send what died in its mailbox.
  spdlog::warn("shard {} was restarted with its state; {} live job(s) on the node go on "
               "unless the shard reports them lost",
               index, st.jobs.size());
}

rack_coordinator_actor::behavior_type
coordinator_behavior(rack_ptr self, coordinator_settings settings,
                     std::vector<chunk_shard_actor> shards) {
  self->state.settings = std::move(settings);
  self->state.shards = std::move(shards);
  if (self->state.settings.balance_interval.count() > 0)
    self->delayed_send(self, self->state.settings.balance_interval, balance_atom::value);
  return {
    [=](hello_atom, hello_request& req) { return on_hello(self, req); },
    [=](proof_atom, proof_request& p) { return on_proof(self, p); },
    [=](attach_atom, const attach_request& req) { return on_attach(self, req); },
    [=](grant_atom, job_grant& g) { return on_grant(self, g); },
    [=](status_atom, uint32_t job_id) { return on_status(self, job_id); },
    [=](ckpt_atom, uint32_t job_id, uint64_t clock, chunk_snapshot& snap) {
      on_periodic(self, job_id, clock, snap);
    },
    [=](step_atom, uint32_t job_id, uint32_t shard, uint64_t clock) {
      on_step(self, job_id, shard, clock);
    },
    [=](metrics_atom) { return node_gauges{job_gauges(self->state), self->state.shards}; },
    [=](checkpoint_atom, uint32_t job_id, uint64_t clock,
        const std::string& dir) -> caf::result<checkpoint_part> {
      if (auto rp = after_balancing<checkpoint_part>(self, checkpoint_atom::value, job_id,
                                                     clock, dir))
        return *rp;
      return on_checkpoint(self, job_id, clock, dir);
    },
    [=](halt_atom, uint32_t job_id, const std::string& reason) {
      return on_halt(self, job_id, reason);
    },
    [=](abort_atom, uint32_t job_id, const std::string& reason) {
      return on_halt(self, job_id, reason, true);
    },
    [=](halt_atom, const std::vector<uint32_t>& keep, const std::string& reason) {
      on_halt_all(self, keep, reason);
    },
    [=](register_atom, cluster_gateway& link) { self->state.link = std::move(link); },
    [=](locate_atom, std::string& address) {
      self->state.cluster_address = std::move(address);
    },
    [=](locate_atom) { return self->state.cluster_address; },
    [=](replace_atom, uint32_t index, chunk_shard_actor& shard) {
      on_replace(self, index, shard);
    },
    [=](inject_atom, uint32_t job_id, const std::string& kill, uint32_t index) {
      return on_inject(self, job_id, kill, index);
    },
    [=](fence_atom, uint32_t job_id, const job_layout& next) -> caf::result<chunk_moves> {
      if (auto rp = after_balancing<chunk_moves>(self, fence_atom::value, job_id, next))
        return *rp;
      return on_fence(self, job_id, next);
    },
    [=](reshape_atom, uint32_t job_id, const job_layout& next,
        const chunk_moves& moves) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, reshape_atom::value, job_id, next, moves))
        return *rp;
      return on_reshape(self, job_id, next, moves);
    },
    [=](reroute_atom, uint32_t job_id, const job_layout& next) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, reroute_atom::value, job_id, next))
        return *rp;
      return on_reroute(self, job_id, next);
    },
    [=](thaw_atom, uint32_t job_id) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, thaw_atom::value, job_id))
        return *rp;
      return on_thaw(self, job_id);
    },
    [=](takeover_atom, uint32_t job_id, const job_layout& next) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, takeover_atom::value, job_id, next))
        return *rp;
      return on_takeover(self, job_id, next);
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id,
        const hyper_change& change) -> caf::result<uint64_t> {
      if (auto rp = after_balancing<uint64_t>(self, hyper_atom::value, job_id, id, change))
        return *rp;
      return on_hyper_prepare(self, job_id, id, change);
    },
    [=](hyper_atom, uint32_t job_id, const hyper_change& change) -> caf::result<uint64_t> {
      return on_hyper_request(self, job_id, change);
    },
    [=](hyper_atom, uint32_t job_id, uint64_t id, bool apply) -> caf::result<ok_atom> {
      if (auto rp = after_balancing<ok_atom>(self, hyper_atom::value, job_id, id, apply))
        return *rp;
      return on_hyper_end(self, job_id, id, apply);
    },
    [=](balance_atom) { on_balance(self); },
    [=](pollers_atom, std::vector<caf::actor>& pollers) {
      self->state.pollers = std::move(pollers);
    },
    [=](leave_atom, uint32_t job_id, uint32_t rank, bool graceful,
        const std::string& reason) { on_leave(self, job_id, rank, graceful, reason); },
    [=](rejoin_atom, uint32_t job_id, uint32_t rank, uint32_t departure) {
      on_rejoin_window(self, job_id, rank, departure);
    },
    [=](abort_atom, uint32_t job_id, errc code, const std::string& why) {
      end_job(self, job_id, "failed", code, why);
    },
  };
}

} // namespace

rack_coordinator_actor spawn_rack_coordinator(caf::actor_system& sys,
                                              coordinator_settings settings,
                                              std::vector<chunk_shard_actor> shards) {
  return sys.spawn(coordinator_behavior, std::move(settings), std::move(shards));
}

} // namespace rw::actors
