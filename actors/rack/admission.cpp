// Admission: a worker's hello (its spec resolved and checked, the open-job quota, the
// rack placement), the proof of the job's token, and an attach to a further endpoint.
// A worker admitted joins the job or creates it (rack/create.cpp).

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "logic/admission.hpp"
#include "logic/limited_log.hpp"
#include "runtime/credentials.hpp"
#include "runtime/ring.hpp"

namespace rw::actors::detail {

std::string peer_host(const std::string& peer) {
  return peer.substr(0, peer.rfind(':'));
}

namespace {

admission_limits limits_of(const coordinator_settings& s) {
  return {s.node_name,     s.max_chunk_bytes,        s.max_workers,
          s.max_job_bytes, s.max_open_jobs_per_peer, s.max_open_jobs_bytes};
}

// Logs a refused hello (once a minute per host and reason) and answers the worker.
job_binding refuse_hello(const hello_request& req, admission_refusal r) {
  log_limited(spdlog::level::warn, req.peer, r.reason,
              fmt::format("hello refused: peer={}{}", req.peer, r.log));
  return refuse(r.code, std::move(r.why));
}

// A hello that states no spec (Hello.specFromJob) gets the job's: the running job's
// on this node, else its live grant's (logic/admission.hpp). Returns the refusal, or
// nothing.
std::optional<job_binding> resolve_spec(rack_ptr self, hello_request& req) {
  auto& st = self->state;
  auto& h = req.hello;
  const job_spec* running = nullptr;
  const job_spec* granted = nullptr;
  if (auto j = st.jobs.find(h.spec.name); j != st.jobs.end())
    running = &j->second.spec;
  else if (auto g = st.grants.find(h.spec.name);
           g != st.grants.end() && g->second.ended.empty())
    granted = &g->second.spec;
  if (auto r = detail::resolve_spec(h.spec, h.spec_from_job, h.rank, running, granted,
                                    limits_of(st.settings)))
    return refuse_hello(req, std::move(r));
  return std::nullopt;
}

// Checks a hello on its own: a valid spec, a rank inside it, a size the node allows
// (a job created with `memory`, a tenant's reservation, may take no more than that).
std::optional<job_binding> check_hello(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  uint64_t reserved = 0;
  if (auto g = st.grants.find(req.hello.spec.name); g != st.grants.end())
    reserved = g->second.max_memory;
  if (auto r = detail::check_hello(req.hello.spec, req.hello.rank, limits_of(st.settings),
                                   reserved))
    return refuse_hello(req, std::move(r));
  return std::nullopt;
}

// A hello that would create an open job: refused if the workers of its host created
// as many live open jobs here as a host may.
std::optional<job_binding> check_open_job_quota(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  if (st.jobs.count(req.hello.spec.name) > 0)
    return std::nullopt;
  auto host = peer_host(req.peer);
  std::vector<std::string> theirs, open;
  uint64_t held = 0;
  for (auto& [name, job] : st.jobs)
    if (!job.granted) {
      open.push_back(name);
      held += detail::job_footprint(job.spec);
      if (job.created_by == host)
        theirs.push_back(name);
    }
  if (auto r = detail::check_open_job_quota(host, theirs, req.hello.spec, req.hello.rank,
                                            limits_of(st.settings)))
    return refuse_hello(req, std::move(r));
  if (auto r = detail::check_open_jobs_budget(held, open, req.hello.spec, req.hello.rank,
                                              limits_of(st.settings)))
    return refuse_hello(req, std::move(r));
  return std::nullopt;
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
  if (req.rank >= job.ranks.size() || job.ranks.status(req.rank) != rank_status::live) {
    log_limited(spdlog::level::warn, req.peer, "attach refused: no such live rank",
                fmt::format("attach refused: peer={} job={} rank={}: no such live rank",
                            req.peer, req.job_id, req.rank));
    return refuse(
      errc::bad_rank,
      fmt::format("attach refused: job {} has no live rank {}", req.job_id, req.rank));
  }
  std::string token; // an open job has none: its proofs are keyed by the attach token
  if (job.granted) {
    auto g = st.grants.find(job.spec.name);
    if (g == st.grants.end() || g->second.secret.empty()) {
      log_limited(spdlog::level::warn, req.peer, "attach refused: the grant is gone",
                  fmt::format("attach refused: peer={} job='{}' id={} rank={}: the job's "
                              "grant (its token) is gone from this node",
                              req.peer, job.spec.name, req.job_id, req.rank));
      return refuse(
        errc::unauthorized,
        fmt::format("attach refused: job '{}' has no token on node {} any more",
                    job.spec.name, st.settings.node_name));
    }
    token = g->second.secret;
  }
  auto attach_token = job.ranks.token(req.rank);
  if (!runtime::verify_attach(token, attach_token, req.nonce, job.spec.name, req.rank,
                              req.mac)) {
    log_limited(spdlog::level::warn, req.peer, "attach refused: wrong proof",
                fmt::format("attach refused: peer={} job='{}' id={} rank={}: wrong proof",
                            req.peer, job.spec.name, req.job_id, req.rank));
    return refuse(
      errc::unauthorized,
      fmt::format("attach refused: the proof for rank {} of job '{}' does not "
                  "match (the job's token, and the attach token of the rank's "
                  "newest welcome)",
                  req.rank, job.spec.name));
  }
  switch (job.ranks.attach(req.rank, req.nonce)) {
    case attach_ledger::verdict::taken: break;
    case attach_ledger::verdict::exhausted:
      log_limited(spdlog::level::warn, req.peer, "attach refused: attaches exhausted",
                  fmt::format("attach refused: peer={} job='{}' id={} rank={}: {} "
                              "attaches since its welcome",
                              req.peer, job.spec.name, req.job_id, req.rank,
                              job.ranks.attaches(req.rank)));
      return refuse(
        errc::too_many_requests,
        fmt::format("attach refused: rank {} attached {} times since its welcome "
                    "(at most {}): say hello again",
                    req.rank, job.ranks.attaches(req.rank),
                    attach_ledger::max_per_welcome));
    case attach_ledger::verdict::replayed:
      log_limited(spdlog::level::warn, req.peer, "attach refused: a replay",
                  fmt::format("attach refused: peer={} job='{}' id={} rank={}: a proof "
                              "that was used already (a replay)",
                              req.peer, job.spec.name, req.job_id, req.rank));
      return refuse(
        errc::unauthorized,
        fmt::format("attach refused: this proof for rank {} of job '{}' was used "
                    "already",
                    req.rank, job.spec.name));
  }
  spdlog::debug("worker attached: job='{}' id={} rank={} peer={}", job.spec.name, job.id,
                req.rank, req.peer);
  return joined(job, req.rank, false);
}

} // namespace rw::actors::detail
