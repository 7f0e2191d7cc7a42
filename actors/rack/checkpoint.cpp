// A checkpoint as one node takes part in it: every shard copies its chunks of the job
// at the clock (actors/shard/checkpoint.hpp), then a detached writer (off the
// coordinator's thread: encoding and fsync take time) writes the node's chunk file
// durably and answers with its manifest entry. And the other way: a restored job's
// chunks homed here, read from whichever files hold them.

#include <functional>
#include <map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/rack/state.hpp"
#include "actors/shard/checkpoint.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/checkpoint/manifest.hpp"

namespace rw::actors::detail {

namespace {

namespace ck = runtime::checkpoint;

struct file_job {
  std::string dir;
  std::shared_ptr<ck::chunk_file> file;
};

} // namespace
} // namespace rw::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(rw::actors::detail::file_job)

namespace rw::actors::detail {

namespace {

// Writes one chunk file of job `job_id` and quits: an actor of its own thread per
// checkpoint. (It takes an argument: CAF 0.17 spawns an argument-less function actor
// through a null tuple pointer, undefined behaviour UBSan stops on.)
caf::behavior file_writer(caf::event_based_actor* self, uint32_t job_id) {
  return {
    [self, job_id](file_job& job) -> caf::result<checkpoint_part> {
      self->quit();
      try {
        auto e = ck::write_chunk_file(job.dir, *job.file);
        checkpoint_part part{e.name, e.bytes, e.xxh64, {}, {}, job.file->clock};
        for (auto& [t, c] : e.chunks) {
          part.tensors.push_back(t);
          part.chunks.push_back(c);
        }
        return part;
      } catch (const std::exception& e) {
        return cluster_error(errc::internal,
                             fmt::format("job id={}: {}", job_id, e.what()));
      }
    },
  };
}

struct gathered {
  std::shared_ptr<ck::chunk_file> file = std::make_shared<ck::chunk_file>();
  size_t pending = 0;
  std::string error;
  bool answered = false; // failed early (a shard crashed): later answers change nothing
  uint64_t hook = 0;     // its entry in rack_state::checkpoint_aborts
};

// Every record at one version: the checkpoint's clock (now_clock: whatever it is).
std::string one_clock(ck::chunk_file& f, uint64_t asked) {
  for (auto& r : f.chunks) {
    if (f.clock == now_clock)
      f.clock = r.version;
    if (r.version != f.clock)
      return fmt::format(
        "chunk {}/{} is at version {}, others at {}: the job's chunks are "
        "not at one clock",
        r.tensor, r.chunk, r.version, f.clock);
  }
  if (f.clock == now_clock)
    f.clock = asked;
  return {};
}

// Writes the node's file on a writer of its own, then done(part or error).
void write_file(rack_ptr self, std::string dir, std::shared_ptr<ck::chunk_file> file,
                uint32_t job_id,
                std::function<void(caf::expected<checkpoint_part>)> done) {
  auto writer = self->system().spawn<caf::detached>(file_writer, job_id);
  self->request(writer, caf::infinite, file_job{std::move(dir), std::move(file)})
    .then(
      [=](checkpoint_part& part) {
        spdlog::info("checkpoint written: job id={} clock={} file={} chunks={} bytes={}",
                     job_id, part.clock, part.file, part.chunks.size(), part.bytes);
        done(std::move(part));
      },
      [=](caf::error& err) {
        spdlog::error("checkpoint of job {} not written: {}", job_id,
                      describe(self->system(), err));
        done(std::move(err));
      });
}

} // namespace

caf::result<checkpoint_part> on_checkpoint(rack_ptr self, uint32_t job_id, uint64_t clock,
                                           const std::string& asked) {
  auto& st = self->state;
  std::string dir; // under this node's own --checkpoint-root, whatever the coordinator's
  try {
    // The coordinator names this node in the answer it gathers.
    dir = st.settings.checkpoint_root.resolve(asked, "checkpoint directory");
  } catch (const ck::checkpoint_error& e) {
    spdlog::error("checkpoint of job {} refused: {}", job_id, e.what());
    return cluster_error(errc::invalid_spec, e.what());
  }
  auto rp = self->make_response_promise<checkpoint_part>();
  auto g = std::make_shared<gathered>();
  auto live = st.names.find(job_id); // a finished job's name is gone here: its id says it
  g->file->job = live == st.names.end() ? fmt::format("job id {}", job_id) : live->second;
  g->file->clock = clock;
  g->file->node = st.settings.node_name;
  g->pending = st.shards.size();
  auto timeout = std::chrono::milliseconds(defaults::checkpoint_timeout_ms);
  // A shard that crashes cannot answer (its successor has no way to): the checkpoint
  // fails at once with the reason, not at the timeout.
  g->hook = st.next_checkpoint_hook++;
  st.checkpoint_aborts[g->hook] = [=](const std::string& why) mutable {
    if (g->answered)
      return;
    g->answered = true;
    spdlog::error("checkpoint of job {} at node {} failed: {}", job_id,
                  self->state.settings.node_name, why);
    rp.deliver(cluster_error(errc::unavailable, why));
  };
  auto finish = [=]() mutable {
    if (--g->pending != 0 || g->answered)
      return;
    self->state.checkpoint_aborts.erase(g->hook);
    if (g->error.empty())
      g->error = one_clock(*g->file, clock);
    if (!g->error.empty()) {
      spdlog::error("checkpoint of job {} at node {} failed: {}", job_id,
                    self->state.settings.node_name, g->error);
      rp.deliver(cluster_error(errc::unavailable, g->error));
      return;
    }
    write_file(self, dir, g->file, job_id,
               [rp](caf::expected<checkpoint_part> part) mutable {
                 if (part)
                   rp.deliver(std::move(*part));
                 else
                   rp.deliver(part.error());
               });
  };
  for (auto& shard : st.shards)
    self->request(shard, timeout, ckpt_atom::value, job_id, clock)
      .then(
        [=](chunk_snapshot& snap) mutable {
          auto& out = g->file->chunks;
          for (auto& r : *snap.chunks)
            out.push_back(std::move(r));
          finish();
        },
        [=](caf::error& err) mutable {
          if (g->error.empty())
            g->error = describe(self->system(), err);
          finish();
        });
  auto name = st.names.find(job_id);
  spdlog::info(
    "checkpoint requested: job='{}' id={} clock={} dir='{}': the shards copy its "
    "chunks at that clock",
    name == st.names.end() ? std::string{"(ended)"} : name->second, job_id,
    clock == now_clock ? std::string{"(as they stand)"} : std::to_string(clock), dir);
  return rp;
}

void on_periodic(rack_ptr self, uint32_t job_id, uint64_t clock, chunk_snapshot& snap) {
  auto& st = self->state;
  auto n = st.names.find(job_id);
  if (n == st.names.end())
    return; // the job ended meanwhile: no file, no manifest
  auto& job = st.jobs.at(n->second);
  auto& part = job.periodic[clock];
  if (!part.file) {
    part.file = std::make_shared<ck::chunk_file>();
    part.file->job = job.spec.name;
    part.file->clock = clock;
    part.file->node = st.settings.node_name;
  }
  for (auto& r : *snap.chunks)
    part.file->chunks.push_back(std::move(r));
  ++part.shards;
  // Complete with a copy of every chunk homed here, however many parts brought them (a
  // shard sends its copies in two parts when chunks moved between shards meanwhile).
  if (part.file->chunks.size() < job.routes->local_chunks())
    return;
  auto file = std::move(part.file);
  job.periodic.erase(clock);
  auto dir = fmt::format("{}/clock-{:010}", job.checkpoint_dir, clock);
  try {
    ck::prepare_part_dir(dir); // 0700; never a link, never over a complete checkpoint
  } catch (const ck::checkpoint_error& e) {
    spdlog::error("periodic checkpoint of job '{}' at clock {} not written: {}",
                  job.spec.name, clock, e.what());
    return;
  }
  // The cluster knows a hierarchical job by its own id, not its top level's.
  auto cluster_id = job.internal ? job_id - top_job_id_offset : job_id;
  // The job's end waits for the file (report_end): under load the write ended after the
  // job had, the job was deleted as soon as it finished, and the coordinator dropped
  // the entry of a checkpoint the job had taken (no manifest).
  ++st.writing[cluster_id].writing;
  write_file(self, dir, std::move(file), job_id,
             [self, cluster_id, clock](caf::expected<checkpoint_part> p) {
               if (p && self->state.link)
                 self->send(self->state.link, checkpoint_atom::value, cluster_id, clock,
                            std::move(*p));
               periodic_written(self, cluster_id);
             });
}

std::string load_restore(const std::string& dir, const job_spec& spec,
                         const runtime::routing_table& routes,
                         std::vector<std::vector<ck::chunk_record>>& per_shard) {
  try {
    auto m = ck::read_manifest(dir);
    if (auto why = ck::restore_mismatch(m, spec); !why.empty())
      return fmt::format("job '{}' cannot start from checkpoint '{}': {}", spec.name, dir,
                         why);
    per_shard.assign(routes.num_shards(), {});
    for (auto& e : m.files) {
      bool wanted = false;
      for (auto& [t, c] : e.chunks)
        wanted = wanted || routes.is_local(t, c);
      if (!wanted)
        continue; // no chunk homed here: not read
      auto f = ck::read_chunk_file(dir, m, e);
      for (auto& r : f.chunks)
        if (r.tensor < routes.num_tensors() && r.chunk < routes.layout(r.tensor).count()
            && routes.is_local(r.tensor, r.chunk))
          per_shard[routes.shard_of(r.tensor, r.chunk)].push_back(std::move(r));
    }
    return {};
  } catch (const ck::checkpoint_error& e) {
    return fmt::format("job '{}' cannot be restored: {}", spec.name, e.what());
  }
}

} // namespace rw::actors::detail
