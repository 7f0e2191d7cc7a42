// Passive replication on the node (actors/links/mirror_link): the mirror link of each flat
// job on several nodes, and the admission of other nodes' links, which say hello as
// protocol::mirror_rank and prove the job's token like a worker.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "logic/limited_log.hpp"
#include "logic/log_text.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

namespace {

// The job a mirror link asks for, live on this node; or the refusal in `refusal`.
job_info* mirrored_job(rack_state& st, const hello_request& req, job_binding& refusal) {
  auto& name = req.hello.spec.name;
  auto g = st.grants.find(name);
  auto j = st.jobs.find(name);
  if (g == st.grants.end() || !g->second.ended.empty() || j == st.jobs.end()
      || j->second.arriving) {
    refusal = refuse(
      errc::unavailable,
      fmt::format("job '{}' is not served on node {} (not yet, or any more): "
                  "no replica here takes its steps",
                  name, st.settings.node_name));
    return nullptr;
  }
  if (req.hello.rank != protocol::mirror_rank || !req.hello.has_token) {
    refusal = refuse(errc::bad_rank,
                     "a mirror link says hello as the mirror rank, with the "
                     "job's token");
    return nullptr;
  }
  return &j->second;
}

} // namespace

job_binding mirror_hello(rack_ptr self, const hello_request& req) {
  auto& st = self->state;
  job_binding refusal;
  auto* job = mirrored_job(st, req, refusal);
  if (job == nullptr) {
    log_limited(spdlog::level::warn, req.peer, "mirror refused",
                fmt::format("mirror refused: peer={} job='{}': {}", req.peer,
                            loggable(req.hello.spec.name),
                            loggable(refusal.message, 256)));
    return refusal;
  }
  job_binding b;
  b.job_id = job->id;
  b.challenge = runtime::make_nonce();
  return b;
}

job_binding mirror_proof(rack_ptr self, const proof_request& p) {
  auto& st = self->state;
  auto& req = p.hello;
  job_binding refusal;
  auto* job = mirrored_job(st, req, refusal);
  if (job == nullptr)
    return refusal;
  auto& g = st.grants.at(job->spec.name);
  if (!runtime::verify(g.secret, p.nonce, job->spec.name, protocol::mirror_rank, p.mac)) {
    log_limited(spdlog::level::warn, req.peer, "mirror refused: wrong token",
                fmt::format("mirror refused: peer={} job='{}' id={}: wrong token",
                            req.peer, job->spec.name, job->id));
    return refuse(errc::unauthorized,
                  fmt::format("wrong token for job '{}': the proof does "
                              "not match",
                              job->spec.name));
  }
  spdlog::info("mirror link joined: job='{}' id={} peer={}: the steps of the chunks "
               "replicated here come from their home",
               job->spec.name, job->id, req.peer);
  job_binding b;
  b.job_id = job->id;
  b.routes = job->routes;
  b.chunk_bytes = job->spec.chunk_bytes;
  b.layout = job->layout;
  b.node_index = job->node_index;
  b.shard_rank = protocol::mirror_rank;
  return b;
}

void mirror_ring(rack_ptr self, job_info& job, const job_layout& layout) {
  auto& st = self->state;
  if (layout.nodes.size() < 2 || is_hierarchical(layout) || !job.granted)
    return;
  if (!job.mirror) {
    auto g = st.grants.find(job.spec.name);
    if (g == st.grants.end())
      return;
    mirror_settings m;
    m.job_id = job.id;
    m.spec = job.spec;
    m.token = g->second.secret;
    m.node_name = st.settings.node_name;
    m.shards = st.shards;
    job.mirror = std::make_shared<mirror_link>(std::move(m));
    job.mirror->start();
  }
  job.mirror->set_ring(layout.ring_version, layout.addresses);
}

} // namespace rw::actors::detail
