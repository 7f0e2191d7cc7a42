#include "actors/rack_coordinator.hpp"

#include <random>
#include <unordered_map>

#include <caf/all.hpp>

#include "runtime/kernels.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace rw::actors {

namespace {

enum class rank_status : uint8_t { absent, live, left };

struct job_info {
  uint32_t id = 0;
  job_spec spec;
  routing_ptr routes;
  std::vector<rank_status> ranks;
  std::vector<uint32_t> connections; // live connections per rank
  std::vector<uint64_t> tokens;      // attach token per rank
  std::shared_ptr<const transports::shm::mapping> params; // shared parameters, if any
};

struct coordinator_state {
  coordinator_settings settings;
  std::vector<chunk_shard_actor> shards;
  std::unordered_map<std::string, job_info> jobs; // by name
  std::unordered_map<uint32_t, std::string> names; // id -> name
  uint32_t next_job_id = 1;
  std::mt19937_64 random{std::random_device{}()};
  static inline const char* name = "rw.rack_coordinator";
};

using coord_ptr = rack_coordinator_actor::stateful_pointer<coordinator_state>;

job_binding refuse(errc code, std::string message) {
  job_binding b;
  b.code = code;
  b.message = std::move(message);
  return b;
}

void end_job(coord_ptr self, uint32_t job_id) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return;
  st.jobs.erase(n->second);
  st.names.erase(n);
}

void abort_job(coord_ptr self, uint32_t job_id, errc code, const std::string& why) {
  auto& st = self->state;
  if (st.names.count(job_id) == 0)
    return;
  spdlog::error("job aborted: {}", why);
  for (auto& s : st.shards)
    self->send(s, abort_atom::value, job_id, code, why);
  end_job(self, job_id);
}

caf::result<job_binding> on_hello(coord_ptr self, hello_request& req) {
  auto& st = self->state;
  auto& spec = req.hello.spec;
  auto rank = req.hello.rank;
  if (auto why = validate(spec, st.settings.max_chunk_bytes, st.settings.max_workers);
      !why.empty()) {
    spdlog::warn("hello refused: peer={} job='{}': invalid job spec: {}", req.peer,
                 spec.name, why);
    return refuse(errc::invalid_spec, "invalid job spec: " + why);
  }
  if (rank >= spec.num_workers) {
    spdlog::warn("hello refused: peer={} job='{}': rank {} outside 0..{}", req.peer,
                 spec.name, rank, spec.num_workers - 1);
    return refuse(errc::bad_rank, fmt::format("rank {} is outside 0..{}", rank,
                                              spec.num_workers - 1));
  }
  uint64_t footprint = 0;
  for (auto& t : spec.tensors)
    footprint += t.elements * sizeof(float) * (1 + runtime::state_arrays(spec.optimizer.kind));
  if (footprint > st.settings.max_job_bytes) {
    auto why = fmt::format("job '{}' needs {} MiB of node memory for parameters and "
                           "optimizer state; this node allows {} MiB per job "
                           "(--max-job-mib)",
                           spec.name, footprint >> 20, st.settings.max_job_bytes >> 20);
    spdlog::warn("hello refused: peer={}: {}", req.peer, why);
    return refuse(errc::invalid_spec, why);
  }
  auto it = st.jobs.find(spec.name);
  if (it != st.jobs.end()) {
    auto& job = it->second;
    if (auto diff = describe_mismatch(job.spec, spec); !diff.empty()) {
      spdlog::warn("hello refused: peer={} rank={}: {}", req.peer, rank, diff);
      return refuse(errc::spec_mismatch, diff);
    }
    if (job.ranks[rank] != rank_status::absent) {
      auto why = fmt::format("rank {} of job '{}' is {}", rank, spec.name,
                             job.ranks[rank] == rank_status::live
                               ? "already held by a connected worker"
                               : "already used by a worker that left");
      spdlog::warn("hello refused: peer={}: {}", req.peer, why);
      return refuse(errc::rank_taken, why);
    }
    job.ranks[rank] = rank_status::live;
    job.connections[rank] = 1;
    job.tokens[rank] = st.random();
    spdlog::info("worker joined: job='{}' id={} rank={} peer={}", spec.name, job.id, rank,
                 req.peer);
    job_binding b;
    b.job_id = job.id;
    b.routes = job.routes;
    b.token = job.tokens[rank];
    b.chunk_bytes = spec.chunk_bytes;
    b.params_segment = job.params ? job.params->name() : std::string{};
    return b;
  }
  // A new job.
  job_info job;
  job.id = st.next_job_id++;
  job.spec = spec;
  job.routes = std::make_shared<runtime::routing_table>(spec, uint32_t(st.shards.size()),
                                                       st.settings.shard_endpoints);
  job.ranks.assign(spec.num_workers, rank_status::absent);
  job.ranks[rank] = rank_status::live;
  job.connections.assign(spec.num_workers, 0);
  job.connections[rank] = 1;
  job.tokens.assign(spec.num_workers, 0);
  job.tokens[rank] = st.random();
  if (st.settings.shared_params) {
    try {
      job.params = std::make_shared<transports::shm::mapping>(
        transports::shm::create_params_segment(spec));
    } catch (const std::exception& e) {
      spdlog::warn("job '{}': parameters stay private (colocated workers get copies): {}",
                   spec.name, e.what());
    }
  }
  uint64_t bytes = 0;
  for (auto& t : spec.tensors)
    bytes += t.elements * sizeof(float);
  spdlog::info("job created: job='{}' id={} workers={} consistency={} optimizer={} lr={} "
               "chunk_bytes={} tensors={} bytes={} chunks={} chunks_per_shard=[{}] "
               "chunks_per_endpoint=[{}]",
               spec.name, job.id, spec.num_workers, to_string(spec.consistency),
               to_string(spec.optimizer.kind),
               spec.optimizer.learning_rate, spec.chunk_bytes, spec.tensors.size(), bytes,
               job.routes->total_chunks(), fmt::join(job.routes->chunks_per_shard(), ","),
               fmt::join(job.routes->chunks_per_endpoint(), ","));
  spdlog::info("worker joined: job='{}' id={} rank={} peer={}", spec.name, job.id, rank,
               req.peer);
  job_binding b;
  b.job_id = job.id;
  b.created = true;
  b.routes = job.routes;
  b.token = job.tokens[rank];
  b.chunk_bytes = spec.chunk_bytes;
  b.params_segment = job.params ? job.params->name() : std::string{};
  auto sink = caf::actor_cast<abort_sink>(self);
  auto rp = self->make_response_promise<job_binding>();
  auto pending = std::make_shared<size_t>(st.shards.size());
  std::vector<caf::actor> peers;
  for (auto& sh : st.shards)
    peers.push_back(caf::actor_cast<caf::actor>(sh));
  for (uint32_t i = 0; i < st.shards.size(); ++i) {
    job_setup setup{job.id, spec, job.routes, i, job.params, peers};
    self->request(st.shards[i], caf::infinite, create_atom::value, std::move(setup), sink)
      .then(
        [=](ok_atom) mutable {
          if (--*pending == 0)
            rp.deliver(b);
        },
        [=](caf::error& err) mutable {
          spdlog::error("job '{}': shard {} failed to create its chunks: {}", b.job_id, i,
                        self->system().render(err));
          rp.deliver(refuse(errc::internal, "a shard failed to create the job"));
        });
  }
  st.names[job.id] = spec.name;
  st.jobs.emplace(spec.name, std::move(job));
  return rp;
}

job_binding on_attach(coord_ptr self, const attach_request& req) {
  auto& st = self->state;
  auto n = st.names.find(req.job_id);
  if (n == st.names.end())
    return refuse(errc::unknown_job, fmt::format("unknown job {}", req.job_id));
  auto& job = st.jobs.at(n->second);
  if (req.rank >= job.ranks.size() || job.ranks[req.rank] != rank_status::live
      || job.tokens[req.rank] != req.token) {
    spdlog::warn("attach refused: peer={} job={} rank={}: no such live rank or wrong token",
                 req.peer, req.job_id, req.rank);
    return refuse(errc::bad_rank, "attach refused: not a live rank of this job, or the "
                                  "wrong token");
  }
  ++job.connections[req.rank];
  spdlog::debug("worker attached: job='{}' id={} rank={} peer={}", job.spec.name, job.id,
                req.rank, req.peer);
  job_binding b;
  b.job_id = job.id;
  b.routes = job.routes;
  b.token = req.token;
  b.chunk_bytes = job.spec.chunk_bytes;
  b.params_segment = job.params ? job.params->name() : std::string{};
  return b;
}

void on_leave(coord_ptr self, uint32_t job_id, uint32_t rank, bool graceful,
              const std::string& reason) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return; // the job already ended
  auto& job = st.jobs.at(n->second);
  if (rank >= job.ranks.size() || job.ranks[rank] != rank_status::live)
    return;
  if (job.connections[rank] > 0)
    --job.connections[rank];
  if (graceful && job.connections[rank] > 0)
    return; // the rank's other connections are still up
  job.ranks[rank] = rank_status::left;
  bool all_left = std::all_of(job.ranks.begin(), job.ranks.end(),
                              [](rank_status s) { return s == rank_status::left; });
  bool others_live = std::any_of(job.ranks.begin(), job.ranks.end(),
                                 [](rank_status s) { return s == rank_status::live; });
  if (!graceful && others_live) {
    spdlog::warn("worker left: job='{}' id={} rank={} without saying bye: {}", job.spec.name,
                 job_id, rank, reason);
    abort_job(self, job_id, errc::worker_left,
              fmt::format("job '{}' (id {}): worker rank {} disconnected mid-job ({})",
                          job.spec.name, job_id, rank, reason));
    return;
  }
  spdlog::info("worker left: job='{}' id={} rank={} ({})", job.spec.name, job_id, rank,
               graceful ? "bye" : reason);
  if (all_left || !others_live) {
    spdlog::info("job finished: job='{}' id={}: every worker has left", job.spec.name,
                 job_id);
    for (auto& s : st.shards)
      self->send(s, drop_atom::value, job_id);
    end_job(self, job_id);
    return;
  }
  auto why = fmt::format("job '{}' (id {}): worker rank {} left the job", job.spec.name,
                         job_id, rank);
  for (auto& s : st.shards)
    self->send(s, leave_atom::value, job_id, rank, why);
}

rack_coordinator_actor::behavior_type
coordinator_behavior(coord_ptr self, coordinator_settings settings,
                     std::vector<chunk_shard_actor> shards) {
  self->state.settings = std::move(settings);
  self->state.shards = std::move(shards);
  return {
    [=](hello_atom, hello_request& req) { return on_hello(self, req); },
    [=](attach_atom, const attach_request& req) { return on_attach(self, req); },
    [=](replace_atom, uint32_t index, chunk_shard_actor& shard) {
      auto& st = self->state;
      if (index >= st.shards.size())
        return;
      st.shards[index] = std::move(shard);
      std::vector<uint32_t> ids;
      for (auto& [id, name] : st.names)
        ids.push_back(id);
      for (auto id : ids)
        abort_job(self, id, errc::internal,
                  fmt::format("job '{}' (id {}): shard {} failed and its chunks were lost",
                              st.names[id], id, index));
    },
    [=](leave_atom, uint32_t job_id, uint32_t rank, bool graceful,
        const std::string& reason) { on_leave(self, job_id, rank, graceful, reason); },
    [=](abort_atom, uint32_t job_id, errc code, const std::string& why) {
      abort_job(self, job_id, code, why);
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
