// Checkpoints, as the cluster coordinator runs them. Consistency at one clock c (BSP):
// every node's shards copy each chunk of the job right after its step to version c
// completes (or at once if it is at c; actors/shard/checkpoint.hpp), so every file
// holds every chunk at the same c whatever the nodes' relative progress. c is ahead of
// every chunk when the checkpoint is asked for while the job runs (one past the
// furthest clock any rank has pushed), or given; a finished job is taken as it ended.
// The nodes write their files in parallel; the manifest is written once every node
// has answered, and not at all if any fails: a directory without a manifest is not a
// checkpoint. Periodic checkpoints (checkpoint_every) need no request: the shards copy
// at every N-th clock on their own, each node writes its file and reports it, and the
// manifest is written here once every node homing chunks has (periodic_part).

#include <algorithm>
#include <filesystem>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/state.hpp"
#include "actors/shard/checkpoint.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/checkpoint/manifest.hpp"
#include "runtime/chunking.hpp"
#include "runtime/ring.hpp"

namespace rw::actors::detail {

namespace {

namespace ck = runtime::checkpoint;

using done_fn = std::function<void(caf::expected<checkpoint_info>)>;

struct parts_acc {
  std::vector<std::pair<std::string, checkpoint_part>> parts; // by node name
  std::vector<std::string> failures;
  size_t pending = 0;
  bool answered = false; // a failure answers at once: a dead node may never answer
};

// A failed checkpoint's node files: removed (a directory without a manifest is not a
// checkpoint; its files only take space). The nodes see `dir` at the same path.
void discard_part(const std::string& dir, const std::string& node,
                  const checkpoint_part& p) {
  if (p.file.empty() || p.file.find('/') != std::string::npos)
    return; // a plain file name in dir, as nodes write them; anything else is left alone
  std::error_code ec;
  std::filesystem::remove(std::filesystem::path(dir) / p.file, ec);
  if (ec)
    spdlog::warn(
      "checkpoint into '{}' failed; node {}'s file {} could not be removed: {}", dir,
      node, p.file, ec.message());
  else
    spdlog::info("checkpoint into '{}' failed; node {}'s file {} removed", dir, node,
                 p.file);
}

// Writes the manifest from every node's part; the checkpoint's clock is the one all
// parts share.
caf::expected<checkpoint_info> write_manifest(const job_entry& j, const std::string& dir,
                                              parts_acc& acc) {
  ck::manifest m;
  m.spec = j.report.spec;
  m.clock = detail::now_clock;
  checkpoint_info info{j.report.name, dir, 0, {}, 0};
  std::sort(acc.parts.begin(), acc.parts.end(),
            [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [node, p] : acc.parts) {
    if (!p.chunks.empty()) {
      if (m.clock != detail::now_clock && p.clock != m.clock)
        return cluster_error(
          errc::internal, fmt::format("checkpoint of job '{}': node {} wrote clock {}, "
                                      "others {}",
                                      j.report.name, node, p.clock, m.clock));
      m.clock = p.clock;
    }
    ck::file_entry e{p.file, p.bytes, p.xxh64, {}};
    for (size_t i = 0; i < p.chunks.size(); ++i)
      e.chunks.emplace_back(p.tensors[i], p.chunks[i]);
    info.files.push_back(p.file);
    info.bytes += p.bytes;
    m.files.push_back(std::move(e));
  }
  if (m.clock == detail::now_clock)
    return cluster_error(errc::internal, "checkpoint: no node holds a chunk of the job");
  info.clock = m.clock;
  try {
    ck::write_manifest(dir, m);
  } catch (const std::exception& e) {
    return cluster_error(errc::internal, e.what());
  }
  return info;
}

// Asks every node of the job for its part at `clock`, then writes the manifest.
void gather_parts(cluster_ptr self, uint32_t id, uint64_t clock, const std::string& dir,
                  done_fn done) {
  auto& j = self->state.jobs.at(id);
  auto node_job = is_hierarchical(j.report.layout) ? id + top_job_id_offset : id;
  auto acc = std::make_shared<parts_acc>();
  acc->pending = j.node_ids.size();
  auto finish = [self, acc, id, dir, done]() {
    --acc->pending;
    if (acc->answered || (acc->pending != 0 && acc->failures.empty()))
      return;
    acc->answered = true;
    auto it = self->state.jobs.find(id);
    if (it == self->state.jobs.end())
      acc->failures.push_back("the job was deleted meanwhile");
    if (!acc->failures.empty()) {
      done(
        cluster_error(errc::unavailable,
                      fmt::format("checkpoint into '{}' failed, no manifest written: {}",
                                  dir, fmt::join(acc->failures, "; "))));
      for (auto& [node, p] : acc->parts) // the nodes that did write theirs
        discard_part(dir, node, p);
      return;
    }
    done(write_manifest(it->second, dir, *acc));
  };
  auto timeout = std::chrono::milliseconds(defaults::checkpoint_timeout_ms)
                 + self->state.settings.node_request_timeout;
  for (auto n : j.node_ids) {
    auto m = self->state.nodes.find(n);
    if (m == self->state.nodes.end()) {
      acc->failures.push_back(fmt::format("node id {} has left the cluster", n));
      finish();
      continue;
    }
    auto name = m->second.info.name;
    self->request(m->second.link, timeout, checkpoint_atom::value, node_job, clock, dir)
      .then(
        [acc, finish, name, dir](checkpoint_part& p) {
          if (acc->answered && !acc->failures.empty()) { // too late: already failed
            --acc->pending;
            discard_part(dir, name, p);
            return;
          }
          acc->parts.emplace_back(name, std::move(p));
          finish();
        },
        [self, acc, finish, name](caf::error& err) {
          acc->failures.push_back(
            fmt::format("node {}: {}", name, describe(self->system(), err)));
          finish();
        });
  }
}

// Why job `j` cannot be checkpointed now ("" if it can).
std::string refusal(const job_entry& j) {
  auto& r = j.report;
  if (r.spec.consistency.model != consistency_spec::bsp)
    return fmt::format(
      "job '{}' runs {}: only a BSP job has one clock every chunk passes "
      "through",
      r.name, to_string(r.spec.consistency));
  if (r.state == "created")
    return fmt::format("job '{}' has no chunks yet (no worker has joined)", r.name);
  if (r.state != "running" && r.state != "finished")
    return fmt::format("job '{}' is {}{}{}: its chunks are gone", r.name, r.state,
                       r.reason.empty() ? "" : ": ", r.reason);
  if (r.spec.tensors.empty())
    return fmt::format("job '{}': its nodes have not reported its tensors yet", r.name);
  return {};
}

// One past the furthest clock any rank of the running job has pushed: ahead of every
// chunk's version. Asks the nodes (their counts are live).
void pick_clock(cluster_ptr self, uint32_t id,
                std::function<void(uint64_t, std::string)> k) {
  auto& j = self->state.jobs.at(id);
  auto acc = std::make_shared<std::pair<uint64_t, std::vector<std::string>>>();
  auto pending = std::make_shared<size_t>(j.node_ids.size());
  for (auto n : j.node_ids) {
    auto m = self->state.nodes.find(n);
    auto finish = [acc, pending, k] {
      if (--*pending == 0)
        k(acc->first + 1, fmt::format("{}", fmt::join(acc->second, "; ")));
    };
    if (m == self->state.nodes.end()) {
      acc->second.push_back(fmt::format("node id {} has left the cluster", n));
      finish();
      continue;
    }
    auto name = m->second.info.name;
    self
      ->request(m->second.link, self->state.settings.node_request_timeout,
                status_atom::value, id)
      .then(
        [acc, finish](job_event& ev) {
          for (auto& r : ev.ranks)
            acc->first = std::max(acc->first, r.clock);
          finish();
        },
        [self, acc, finish, name](caf::error& err) {
          acc->second.push_back(
            fmt::format("node {}: {}", name, describe(self->system(), err)));
          finish();
        });
  }
}

// Takes the checkpoint; done gets what was written, or why not.
void take(cluster_ptr self, uint32_t id, const std::string& dir, uint64_t clock,
          done_fn done) {
  auto& j = self->state.jobs.at(id);
  if (auto why = refusal(j); !why.empty()) {
    done(cluster_error(errc::invalid_spec, "cannot checkpoint: " + why));
    return;
  }
  try {
    ck::prepare_dir(dir);
  } catch (const ck::checkpoint_error& e) {
    done(cluster_error(errc::invalid_spec, e.what()));
    return;
  }
  if (j.report.state == "finished") {
    gather_parts(self, id, detail::now_clock, dir, done);
    return;
  }
  if (clock != 0) {
    gather_parts(self, id, clock, dir, done);
    return;
  }
  pick_clock(self, id, [self, id, dir, done](uint64_t c, std::string failures) {
    if (!failures.empty()) {
      done(cluster_error(errc::unavailable,
                         "checkpoint: cannot read the job's clock: " + failures));
      return;
    }
    if (self->state.jobs.count(id) == 0) {
      done(cluster_error(errc::unknown_job, "checkpoint: the job was deleted meanwhile"));
      return;
    }
    gather_parts(self, id, c, dir, done);
  });
}

} // namespace

caf::result<checkpoint_info> checkpoint_job(cluster_ptr self, const std::string& name,
                                            const std::string& dir, uint64_t clock) {
  auto n = self->state.by_name.find(name);
  if (n == self->state.by_name.end())
    return cluster_error(errc::unknown_job, fmt::format("no job named '{}'", name));
  if (dir.empty())
    return cluster_error(errc::invalid_spec, "checkpoint: give a directory");
  std::string where; // the directory under --checkpoint-root, canonical
  try {
    where = self->state.settings.checkpoint_root.resolve(dir, "directory");
  } catch (const ck::checkpoint_error& e) {
    spdlog::warn("checkpoint refused: job='{}': {}", name, e.what());
    return cluster_error(errc::invalid_spec, e.what());
  }
  auto rp = self->make_response_promise<checkpoint_info>();
  spdlog::info("checkpoint asked: job='{}' dir='{}' clock={}", name, where,
               clock == 0 ? std::string{"(next)"} : std::to_string(clock));
  take(self, n->second, where, clock,
       [self, rp, name](caf::expected<checkpoint_info> r) mutable {
         if (!r) {
           spdlog::error("checkpoint of job '{}' failed: {}", name,
                         describe(self->system(), r.error()));
           rp.deliver(r.error());
           return;
         }
         spdlog::info("checkpoint taken: job='{}' dir='{}' clock={} files={} bytes={}",
                      name, r->dir, r->clock, r->files.size(), r->bytes);
         rp.deliver(std::move(*r));
       });
  return rp;
}

std::string check_restore(job_spec& spec, const std::string& dir) {
  try {
    auto m = ck::read_manifest(dir);
    auto as_if = spec;
    as_if.tensors = m.spec.tensors; // the workers declare them: the nodes check those
    if (auto why = ck::restore_mismatch(m, as_if); !why.empty())
      return fmt::format("job '{}' cannot start from checkpoint '{}': {}", spec.name, dir,
                         why);
    if (spec.consistency.model != consistency_spec::bsp)
      return fmt::format("job '{}' runs {}: a checkpoint restores a BSP job", spec.name,
                         to_string(spec.consistency));
    spec.schedule = m.spec.schedule; // the hyper-parameter changes made before it
  } catch (const ck::checkpoint_error& e) {
    return e.what();
  }
  return {};
}

namespace {

// How many of the job's nodes home at least one chunk (the others write no file).
size_t nodes_holding(const job_entry& j) {
  auto& l = j.report.layout;
  if (l.nodes.size() <= 1 || j.report.spec.tensors.empty())
    return std::max<size_t>(j.node_ids.size(), 1);
  runtime::hash_ring ring{l.nodes, l.vnodes, l.ring_version};
  size_t n = 0;
  for (uint32_t i = 0; i < l.nodes.size(); ++i)
    n += runtime::routing_table(j.report.spec, 1, {}, &ring, i).local_chunks() > 0 ? 1
                                                                                   : 0;
  return n;
}

} // namespace

void periodic_part(cluster_ptr self, uint32_t node_id, uint32_t id, uint64_t clock,
                   checkpoint_part& part) {
  auto it = self->state.jobs.find(id);
  if (it == self->state.jobs.end() || !it->second.on_node(node_id)
      || it->second.checkpoint_every == 0)
    return; // deleted meanwhile, or not this node's
  auto& j = it->second;
  auto node = self->state.nodes.find(node_id);
  auto name = node == self->state.nodes.end() ? fmt::format("id {}", node_id)
                                              : node->second.info.name;
  auto& parts = j.periodic[clock];
  parts.emplace_back(name, std::move(part));
  if (parts.size() < nodes_holding(j))
    return;
  parts_acc acc;
  acc.parts = std::move(parts);
  j.periodic.erase(clock);
  auto dir = fmt::format("{}/clock-{:010}", j.checkpoint_dir, clock);
  auto info = write_manifest(j, dir, acc);
  if (!info) {
    spdlog::error("periodic checkpoint of job '{}' at clock {}: no manifest: {}",
                  j.report.name, clock, describe(self->system(), info.error()));
    return;
  }
  spdlog::info("periodic checkpoint taken: job='{}' dir='{}' clock={} files={} bytes={}",
               j.report.name, info->dir, info->clock, info->files.size(), info->bytes);
  if (info->clock >= j.last_checkpoint_clock) {
    j.last_checkpoint = info->dir;
    j.last_checkpoint_clock = info->clock;
    save_job(self, j.report.id); // a coordinator that restarts knows it too
  }
}

} // namespace rw::actors::detail
