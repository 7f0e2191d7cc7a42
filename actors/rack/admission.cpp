// Admission: a worker's hello (its spec resolved and checked, the open-job quota, the
// rack placement), the proof of the job's token, and an attach to a further endpoint.
// A worker admitted joins the job or creates it (rack/create.cpp).

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "logic/chunk_state.hpp"
#include "logic/limited_log.hpp"
#include "runtime/credentials.hpp"
#include "runtime/kernels.hpp"
#include "runtime/ring.hpp"

namespace rw::actors::detail {

std::string peer_host(const std::string& peer) {
  return peer.substr(0, peer.rfind(':'));
}

namespace {

// Attaches one welcome admits (a worker makes one per further endpoint of the node,
// again after a lost connection): what bounds the nonces kept against replays.
constexpr size_t max_attaches_per_welcome = 4096;

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
  } else if (auto g = st.grants.find(name);
             g != st.grants.end() && g->second.ended.empty()) {
    h.spec = g->second.spec;
    if (h.spec.tensors.empty())
      h.spec.tensors = declared;
  } else {
    auto why = fmt::format(
      "no job named '{}' on node {}: a worker that states no spec joins "
      "a job created through the cluster (rw.job_create, "
      "rackweave.create_job) or already running here",
      name, st.settings.node_name);
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, h.rank, why));
    return refuse(errc::unknown_job, why);
  }
  if (h.spec.tensors.empty()) {
    auto why = fmt::format(
      "job '{}' has no tensors yet: the first worker to join declares "
      "them (worker_options.job.tensors; Python: tensors=...)",
      name);
    log_limited(spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
                fmt::format("hello refused: peer={} rank={}: {}", req.peer, h.rank, why));
    return refuse(errc::invalid_spec, why);
  }
  if (!declared.empty()) {
    auto theirs = h.spec;
    theirs.tensors = std::move(declared);
    if (auto diff = describe_mismatch(h.spec, theirs); !diff.empty()) {
      log_limited(
        spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
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
    log_limited(spdlog::level::warn, req.peer,
                "hello refused: peer={} job='{}': invalid job spec: {}",
                fmt::format("hello refused: peer={} job='{}': invalid job spec: {}",
                            req.peer, spec.name, why));
    return refuse(errc::invalid_spec, "invalid job spec: " + why);
  }
  if (rank >= spec.num_workers) {
    log_limited(spdlog::level::warn, req.peer,
                "hello refused: peer={} job='{}': rank {} outside 0..{}",
                fmt::format("hello refused: peer={} job='{}': rank {} outside 0..{}",
                            req.peer, spec.name, rank, spec.num_workers - 1));
    return refuse(errc::bad_rank,
                  fmt::format("rank {} is outside 0..{}", rank, spec.num_workers - 1));
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
    const uint64_t last =
      (uint64_t{layout.length(layout.count() - 1)} * sizeof(float) + 63) / 64 * 64;
    footprint += arrays * ((count - 1) * full + last)
                 + count * sizeof(detail::chunk_state);
  }
  // A job created with `memory` (a tenant's reservation) may take no more than that.
  uint64_t limit = st.settings.max_job_bytes;
  std::string source = "this node allows {} MiB per job (--max-job-mib)";
  if (auto g = st.grants.find(spec.name);
      g != st.grants.end() && g->second.max_memory != 0 && g->second.max_memory < limit) {
    limit = g->second.max_memory;
    source =
      "the job was created with memory = {} MiB (rw.job_create): create it with more";
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

// A hello that would create an open job: refused if the workers of its host created
// as many live open jobs here as a host may.
std::optional<job_binding> check_open_job_quota(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  auto limit = st.settings.max_open_jobs_per_peer;
  if (limit == 0 || st.jobs.count(req.hello.spec.name) > 0)
    return std::nullopt;
  auto host = peer_host(req.peer);
  std::vector<std::string> theirs;
  for (auto& [name, job] : st.jobs)
    if (!job.granted && job.created_by == host)
      theirs.push_back(name);
  if (theirs.size() < limit)
    return std::nullopt;
  auto why = fmt::format(
    "host {} has created {} live jobs on node {} already (at most {}, "
    "--max-open-jobs-per-peer): finish or stop one of [{}] first",
    host, theirs.size(), st.settings.node_name, limit, fmt::join(theirs, ", "));
  log_limited(spdlog::level::warn, req.peer,
              "hello refused: peer={} job='{}' rank={}: {}",
              fmt::format("hello refused: peer={} job='{}' rank={}: {}", req.peer,
                          req.hello.spec.name, req.hello.rank, why));
  return refuse(errc::too_many_requests, why);
}

} // namespace

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
    log_limited(
      spdlog::level::warn, req.peer,
      "hello refused: peer={} job='{}' rank={}: the job has ended here ({})",
      fmt::format("hello refused: peer={} job='{}' rank={}: the job has ended here ({})",
                  req.peer, spec.name, req.hello.rank, grant.ended));
    // It may live on elsewhere (started again from a checkpoint on other nodes): the
    // cluster says where, else the worker hears why it ended here.
    return send_on(
      self, req,
      refuse(errc::unknown_job,
             fmt::format("job '{}' has ended ({}{}{}); create a new job to train "
                         "again",
                         spec.name, grant.ended, grant.reason.empty() ? "" : ": ",
                         grant.reason)));
  }
  auto asked = grant.spec;
  if (asked.tensors.empty())
    asked.tensors = spec.tensors; // the grant leaves the tensors to the workers
  if (auto diff = describe_mismatch(asked, spec); !diff.empty()) {
    log_limited(
      spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
      fmt::format("hello refused: peer={} rank={}: {}", req.peer, req.hello.rank, diff));
    return refuse(errc::spec_mismatch, diff);
  }
  if (grant.joining && st.jobs.count(spec.name) == 0) {
    auto why = fmt::format(
      "job '{}' is moving onto node {} (rw.node_join) and is not served "
      "here until its chunks arrive; say hello to one of its nodes [{}]",
      spec.name, st.settings.node_name, fmt::join(grant.layout.addresses, ","));
    log_limited(
      spdlog::level::warn, req.peer, "hello refused: peer={} rank={}: {}",
      fmt::format("hello refused: peer={} rank={}: {}", req.peer, req.hello.rank, why));
    return refuse(errc::unavailable, why);
  }
  if (auto elsewhere = place_hello(self, grant, req))
    return *elsewhere;
  if (!req.hello.has_token) {
    log_limited(spdlog::level::warn, req.peer,
                "hello refused: peer={} job='{}' rank={}: no token",
                fmt::format("hello refused: peer={} job='{}' rank={}: no token", req.peer,
                            spec.name, req.hello.rank));
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
    return refuse(
      errc::unknown_job,
      fmt::format("job '{}' ended while the worker was proving its token", spec.name));
  if (!runtime::verify(g->second.secret, p.nonce, spec.name, req.hello.rank, p.mac)) {
    log_limited(spdlog::level::warn, req.peer,
                "hello refused: peer={} job='{}' id={} rank={}: wrong token",
                fmt::format("hello refused: peer={} job='{}' id={} rank={}: wrong token",
                            req.peer, spec.name, g->second.job_id, req.hello.rank));
    return refuse(
      errc::unauthorized,
      fmt::format("wrong token for job '{}': the proof does not match", spec.name));
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
    return refuse(
      errc::bad_rank,
      fmt::format("attach refused: job {} has no live rank {}", req.job_id, req.rank));
  }
  std::string token; // an open job has none: its proofs are keyed by the attach token
  if (job.granted) {
    auto g = st.grants.find(job.spec.name);
    if (g == st.grants.end() || g->second.secret.empty()) {
      spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: the job's grant (its "
                   "token) is gone from this node",
                   req.peer, job.spec.name, req.job_id, req.rank);
      return refuse(
        errc::unauthorized,
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
    return refuse(
      errc::unauthorized,
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
    return refuse(
      errc::too_many_requests,
      fmt::format("attach refused: rank {} attached {} times since its welcome "
                  "(at most {}): say hello again",
                  req.rank, used.seen.size(), max_attaches_per_welcome));
  }
  if (!used.seen.insert(req.nonce).second) {
    spdlog::warn("attach refused: peer={} job='{}' id={} rank={}: a proof that was used "
                 "already (a replay)",
                 req.peer, job.spec.name, req.job_id, req.rank);
    return refuse(
      errc::unauthorized,
      fmt::format("attach refused: this proof for rank {} of job '{}' was used "
                  "already",
                  req.rank, job.spec.name));
  }
  ++job.connections[req.rank];
  spdlog::debug("worker attached: job='{}' id={} rank={} peer={}", job.spec.name, job.id,
                req.rank, req.peer);
  return joined(job, req.rank, false);
}

} // namespace rw::actors::detail
