// A job's life on the shard: created, refused, failed, timed out, checkpointed, dropped
// when it ends (kept a while for checkpoints), and a successor adopting the book.

#include "actors/shard/handlers.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/chunk_state.hpp"
#include "logic/shard_answers.hpp"
#include "actors/shard/balance.hpp"
#include "actors/shard/hyper.hpp"
#include "actors/shard/checkpoint.hpp"
#include "actors/shard/job.hpp"
#include "actors/shard/moves.hpp"
#include "actors/shard/slow_steps.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/trace.hpp"

namespace rw::actors::shard_impl {

// Answers a frame for a job this shard does not hold: gone (with why), or never known.
void refuse_missing_job(const shard_state& st, const transports::connection_ptr& conn,
                        const frame_header& about) {
  auto i = st.book->tombstones.find(about.job_id);
  if (i != st.book->tombstones.end() && i->second.code == errc::moved)
    return; // routed by a ring the job left: the worker sends it again by the new one
  if (i != st.book->tombstones.end())
    conn->send_error(i->second.code,
                     fmt::format("job {} is gone: {}", about.job_id, i->second.why),
                     about);
  else
    conn->send_error(errc::unknown_job, fmt::format("unknown job {}", about.job_id),
                     about);
}

void bury(shard_state& st, uint32_t job_id, errc code, std::string why) {
  st.answers.flush(); // before the job's chunks (which answers held may point at) go
  st.held.drop(job_id);
  st.book->jobs.erase(job_id);
  st.book->tombstones[job_id] = {code, std::move(why)};
  while (st.book->tombstones.size() > max_tombstones)
    st.book->tombstones.erase(st.book->tombstones.begin());
}

// Fails every waiter of `job` with `code` and drops the job.
void fail_job(shard_state& st, uint32_t job_id, errc code, const std::string& why) {
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end()) {
    // A job this shard does not hold (it never had chunks here, or it ended): frames for it
    // get the reason rather than "unknown job".
    bury(st, job_id, code, why);
    return;
  }
  for_each_own_chunk(
    st, it->second, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
      for (auto& w : cs.take_all())
        w.conn->send_error(code, why, about(job_id, w.rank, t, c, w.version));
      return true;
    });
  for (auto& p : it->second.checkpoints)
    if (p.reply)
      p.reply->fail(
        code, fmt::format("checkpoint at clock {}: the job failed: {}", p.clock, why));
  bury(st, job_id, code, why);
}

// Fails the waiters of steps that still need `rank` (which has left).
void fail_steps_needing(shard_state& st, uint32_t job_id, shard_job& job, uint32_t rank,
                        const std::string& why) {
  for_each_own_chunk(st, job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
    if (cs.needs(rank))
      for (auto& w : cs.take_all())
        w.conn->send_error(errc::worker_left, why,
                           about(job_id, w.rank, t, c, w.version));
    return true;
  });
}

// The answer to a request about job `job_id` that this shard does not hold (it ended,
// failed or never had chunks here): a move, a takeover or a balancing step.
shard_refusal no_live_job(const shard_state& st, uint32_t job_id) {
  return {errc::unknown_job,
          fmt::format("shard {} has no live job {}", st.settings.index, job_id)};
}

// The job of a request, or null (refused if the job is gone; dropped unanswered if the
// job is frozen for a move, or the chunk is not this shard's by the job's routes: it
// was routed by a ring the job has left, and the worker sends it again by the new one).
shard_job* find_job(shard_core& self, uint32_t job_id,
                    const transports::connection_ptr& conn, uint32_t rank,
                    uint32_t tensor, uint32_t chunk, uint64_t clock) {
  return find_job(self, conn, about(job_id, rank, tensor, chunk, clock));
}

shard_job* find_job(shard_core& self, const transports::connection_ptr& conn,
                    const frame_header& request) {
  auto& st = self.state;
  auto it = st.book->jobs.find(request.job_id);
  if (it != st.book->jobs.end()) {
    auto& job = it->second;
    if (job.frozen
        || job.routes->shard_of(request.tensor_id, request.chunk_index)
             != st.settings.index)
      return nullptr;
    return &it->second;
  }
  refuse_missing_job(st, conn, request);
  return nullptr;
}

shard_refusal create_job(shard_core& self, job_setup& setup,
                         std::shared_ptr<job_reports> coordinator) {
  auto& st = self.state;
  shard_job job;
  try {
    job = detail::make_shard_job(setup, std::move(coordinator), st.settings.numa);
  } catch (const std::exception& e) {
    spdlog::error("shard {}: job {}: {}", st.settings.index, setup.job_id, e.what());
    return {errc::invalid_spec, e.what()};
  }
  if (st.settings.register_memory && job.memory->size() > 0) {
    try {
      job.memory_registration = st.settings.register_memory(job.memory->data(),
                                                            job.memory->size());
    } catch (const std::exception& e) { // its answers register on their first send
      spdlog::warn("shard {}: job {}: the parameter arena ({} bytes) was not registered "
                   "ahead: {}",
                   st.settings.index, setup.job_id, job.memory->size(), e.what());
    }
  }
  st.book->memory_numa = job.memory_numa();
  st.book->stats.chunks += job.chunks.size();
  // A job that comes back (it moved away and a node join brought it here again) is
  // live: no older copy or tombstone answers for it.
  st.book->tombstones.erase(setup.job_id);
  auto& done = st.book->finished;
  done.erase(std::remove_if(done.begin(), done.end(),
                            [&](auto& f) { return f.id == setup.job_id; }),
             done.end());
  st.book->jobs.emplace(setup.job_id, std::move(job));
  return {};
}

// A checkpoint of a job this shard holds, live or finished.
void on_checkpoint(shard_core& self, uint32_t job_id, uint64_t clock,
                   snapshot_reply_ptr reply) {
  auto& st = self.state;
  shard_job* job = nullptr;
  if (auto it = st.book->jobs.find(job_id); it != st.book->jobs.end())
    job = &it->second;
  for (auto& kept : st.book->finished)
    if (kept.id == job_id)
      job = &kept.job;
  if (job == nullptr) {
    auto t = st.book->tombstones.find(job_id);
    reply->fail(errc::unknown_job,
                t == st.book->tombstones.end()
                  ? fmt::format("shard {} has no job {}", st.settings.index, job_id)
                  : fmt::format("job {} is gone: {}", job_id, t->second.why));
    return;
  }
  auto p = detail::start_checkpoint(*job, clock, [&](auto fn) {
    for_each_own_chunk(st, *job, [&](uint32_t t, uint32_t c, detail::chunk_state& cs) {
      return !job->routes->is_owned(t, c) || fn(t, c, cs); // replicas: their home's copy
    });
  });
  if (!p.error.empty()) {
    reply->fail(errc::invalid_spec, p.error);
    return;
  }
  if (p.remaining == 0) {
    reply->deliver(p.taken);
    return;
  }
  p.reply = std::move(reply);
  job->checkpoints.push_back(std::move(p));
}

// A step that has waited past --slow-step-ms is named once: the ranks it waits for and
// their chunks not pushed here. At most one line per job every slow_log_every.
constexpr auto slow_log_every = std::chrono::seconds(10);
void name_slow_step(const shard_state& st, uint32_t job_id, shard_job& job,
                    clock_type::time_point now) {
  auto slow = detail::find_slow_steps(job, st.settings.index, now, st.settings.slow_step);
  if (slow.empty() || slow.clock < job.slow_logged)
    return;
  job.slow_logged = slow.clock + 1;
  if (job.slow_logged_at != clock_type::time_point{}
      && now - job.slow_logged_at < slow_log_every) {
    ++job.slow_unlogged; // every step is slow: a line per slow_log_every is enough
    return;
  }
  auto unlogged = std::exchange(job.slow_unlogged, 0);
  job.slow_logged_at = now;
  spdlog::warn("job '{}' (id {}): step {} has waited {} ms on shard {} for {}; the "
               "step timeout is {} ms{}",
               job.spec.name, job_id, slow.clock,
               std::chrono::duration_cast<std::chrono::milliseconds>(slow.waited).count(),
               st.settings.index, detail::slow_steps_text(slow),
               st.settings.step_timeout.count(),
               unlogged == 0 ? std::string{}
                             : fmt::format(" ({} slow step{} before it not logged)",
                                           unlogged, unlogged == 1 ? "" : "s"));
  runtime::trace::instant("slow step", "shard",
                          {job_id, slow.ranks.begin()->first, runtime::trace::about::none,
                           runtime::trace::about::none, slow.clock});
}

void scan_timeouts(shard_core& self) {
  auto& st = self.state;
  auto now = clock_type::now();
  for (auto& [job_id, job] : st.book->jobs) {
    if (job.timed_out)
      continue;
    name_slow_step(st, job_id, job, now);
    for_each_own_chunk(
      st, job,
      [&, id = job_id, &job = job](uint32_t t, uint32_t c, detail::chunk_state& cs) {
        if (!cs.step_open() || now - cs.opened_at() < st.settings.step_timeout)
          return true;
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          now - cs.opened_at());
        auto why = fmt::format(
          "job '{}' (id {}): step {} of chunk {}/{} waited {} ms for "
          "ranks [{}]; the step timeout is {} ms",
          job.spec.name, id, cs.version(), t, c, waited.count(),
          fmt::join(cs.missing_ranks(), ", "), st.settings.step_timeout.count());
        job.timed_out = true;
        if (job.coordinator)
          job.coordinator->failed(id, errc::step_timeout, why);
        return false;
      });
  }
}

// Finished jobs kept past their time are released: their arena goes back to the system
// and a checkpoint of them is refused saying so (the tombstone's reason).
void release_finished(shard_state& st) {
  auto now = std::chrono::steady_clock::now();
  auto& done = st.book->finished;
  while (!done.empty() && done.front().release_at <= now) {
    auto id = done.front().id;
    done.pop_front();
    if (auto t = st.book->tombstones.find(id); t != st.book->tombstones.end())
      t->second.why += fmt::format("; its chunks were released {} ms after it ended "
                                   "(--keep-finished-ms)",
                                   st.settings.keep_finished.count());
  }
}

// A job leaves the shard (it finished, or moved to other nodes): its chunks are kept a
// while for a checkpoint; frames for it are answered by `code` and `why`.
void drop_job(shard_core& self, uint32_t job_id, errc code, const std::string& why) {
  auto it = self.state.book->jobs.find(job_id);
  if (it == self.state.book->jobs.end())
    return;
  auto& st = self.state;
  st.book->stats.chunks -= it->second.chunks.size();
  auto job = std::move(it->second);
  bury(st, job_id, code, why);
  detail::fail_checkpoints(job, "the job finished before every chunk reached it");
  if (st.settings.keep_finished.count() > 0)
    st.book->finished.push_back(
      {job_id, std::move(job),
       std::chrono::steady_clock::now() + st.settings.keep_finished});
  while (st.book->finished.size() > defaults::kept_finished_jobs)
    st.book->finished.pop_front();
}

// Why job `job` cannot go on after its shard died (its state may be lost), or "".
std::string lost_state(const shard_state& st, uint32_t job_id, shard_job& job) {
  if (st.book->changing == job_id)
    return "the shard died while changing the job's chunks";
  if (!job.incoming.empty())
    return "chunks moving here from another shard of the node (balancing) may have died "
           "in the shard's mailbox";
  if (runtime::is_layerwise(job.spec.optimizer.kind) && !job.chunks.empty())
    return "a layer-wise optimizer's norm and trust messages between shards may have "
           "died in the shard's mailbox";
  bool waiting = false;
  if (job.relay)
    for_each_own_chunk(st, job, [&](uint32_t t, uint32_t, detail::chunk_state& cs) {
      waiting = cs.relay_pending()
                || (!cs.initialized()
                    && job.spec.tensors[t].has_init); // its init comes from home
      return !waiting;
    });
  if (waiting)
    return "a step of the rack's part waited for its home's answer, which may have died "
           "in the shard's mailbox";
  return {};
}

// A shard that takes over a book its predecessor held (it died): the jobs whose state
// is whole go on, the others fail; pushes its predecessor had queued are served.
void adopt(shard_core& self) {
  auto& st = self.state;
  auto& book = *st.book;
  std::vector<uint32_t> kept;
  std::vector<std::pair<uint32_t, std::string>> lost;
  for (auto& [id, job] : book.jobs) {
    // Checkpoint promises of the dead shard cannot be kept by this one: dropped; the
    // node's coordinator fails those checkpoints when it learns of the restart.
    job.checkpoints.clear();
    // A move's fence likewise: the node's coordinator gives the move up when it times
    // out.
    job.settle_reply.reset();
    auto why = lost_state(st, id, job);
    if (why.empty())
      kept.push_back(id);
    else
      lost.emplace_back(id, std::move(why));
  }
  for (auto& [id, why] : lost) {
    auto& job = book.jobs.at(id);
    auto reason = fmt::format(
      "job '{}' (id {}): shard {} crashed and was restarted, but {}", job.spec.name, id,
      st.settings.index, why);
    if (job.coordinator)
      job.coordinator->failed(id, errc::internal, reason);
    fail_job(st, id, errc::internal, reason);
  }
  book.changing.reset();
  for (auto& id : kept) // acks of mirrored sums may have died in the mailbox
    remirror(self, id, book.jobs.at(id));
  for (size_t i = 0; i < book.backlog.size(); ++i)
    self.out.work_later();
  spdlog::warn("shard {} (restart {}) took over its predecessor's chunks: jobs [{}] go "
               "on; {} job(s) failed; {} queued pushes to serve",
               st.settings.index, book.incarnation - 1, fmt::join(kept, ","), lost.size(),
               book.backlog.size());
}

} // namespace rw::actors::shard_impl
