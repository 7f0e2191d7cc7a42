#pragma once
// One job as one shard holds it: the chunks it owns (their state in one NUMA-local
// arena, or their parameters in the job's shared segment), the job's routing, and what
// the shard needs to run the job's protocol.

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <vector>

#include "actors/shard/outbox.hpp"
#include "actors/shard/requests.hpp"
#include "logic/chunk_state.hpp"
#include "logic/step_lateness.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/topology.hpp"

namespace rw::actors::detail {

/// A checkpoint waiting for this shard's chunks of a job to reach its clock.
struct pending_checkpoint {
  uint64_t clock = 0;
  size_t remaining = 0; // chunks not yet at the clock
  chunk_snapshot taken;
  snapshot_reply_ptr reply; // answered once `remaining` is 0, or failed
};

struct shard_job {
  /// NUMA domain of the chunk memory (-1: the job has no chunks on this shard).
  int memory_numa() const;

  job_spec spec;
  // Chunk state: params (unless shared), m, v. Shared: a chunk that moves to another
  // shard of the node (balancing) keeps its memory, and that shard keeps the arena.
  std::shared_ptr<runtime::numa_region> memory = std::make_shared<runtime::numa_region>();
  // The arena's registration with the fabric NIC (shard_settings::register_memory),
  // dropped with the job, before the arena is freed.
  std::shared_ptr<void> memory_registration;
  // Arenas of the shards chunks moved here from, kept while this job's chunks live.
  std::vector<std::shared_ptr<runtime::numa_region>> borrowed;
  std::shared_ptr<const transports::shm::mapping> shared; // the job's shared params
  routing_ptr routes;
  float rescale = 1.0f;
  std::vector<detail::chunk_state> chunks; // by routes->local_index(tensor, chunk)
  // Of them, homed here (the others are replicas: they take each step's sum from their
  // home and run the same step on it, answer nobody, and are in no checkpoint).
  size_t owned_chunks = 0;
  std::vector<bool> departed; // ranks that left
  job_counters counters;      // by rank, for job status
  // BSP: how late each rank's pushes of a step come here (job status, /metrics).
  step_lateness lateness;
  // The newest step named in the log as waiting past the slow-step threshold (+1; 0:
  // none), so that each step is logged once; when the last line was, and the slow
  // steps not logged since (one line per job and shard every slow_log_every).
  uint64_t slow_logged = 0;
  std::chrono::steady_clock::time_point slow_logged_at{};
  uint64_t slow_unlogged = 0;
  // Steps the job's chunks here completed, summed, and the clock last told to the
  // coordinator (their count over the chunks': handle_steps.cpp, count_step).
  uint64_t steps_done = 0;
  uint64_t clock_told = 0;
  uint32_t departed_count = 0;
  std::shared_ptr<job_reports> coordinator; // null: nobody to tell
  bool timed_out = false;
  std::shared_ptr<const shard_peers> peers; // every shard of the node, by index
  std::shared_ptr<chunk_relay> relay;       // a hierarchical job's rack part (else null)
  std::shared_ptr<chunk_mirror> mirror;     // a flat job on several nodes (else null)
  uint32_t init_rank = 0;                   // who sets version 0
  // Home shard of a tensor (LAMB, LARS): per (tensor, version) the parts received, by
  // chunk, so they are added in chunk order whatever order they came in.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<std::optional<runtime::norm_parts>>>
    norms;
  std::vector<pending_checkpoint> checkpoints;
  uint64_t checkpoint_every = 0;               // periodic checkpoints (0: none)
  std::map<uint64_t, chunk_snapshot> periodic; // by clock, until every chunk is in
  // Moving the job (a node drained; chunk_shard.hpp, "Moving"): settling while its
  // chunks finish the steps begun (settle_reply: the copy asked for once they have), then
  // frozen: every request for it is dropped unanswered until it is reshaped or thawed.
  bool settling = false;
  bool frozen = false;
  uint64_t ring_version = 0; // pushes and inits routed by an older ring are dropped,
  uint64_t kept_from = 0;    // but after a takeover workers' pushes routed by rings
                             // from kept_from on count (detail::stale_push)
  snapshot_reply_ptr settle_reply; // the fence's answer, once settled (null: none)
  // The move's first phase (hold_atom): the job's pushes wait here, uncounted, until the
  // fence says how far each tensor of a layer-wise job settles (settle_to, by tensor).
  bool holding = false;
  std::vector<chunk_push> held;
  std::map<uint32_t, uint64_t> settle_to;
  // In-node balancing (actors/shard/balance.hpp): chunks the routes already put here
  // whose state is still on its way from the shard they leave (by local index; empty:
  // none), and the requests for them that came meanwhile, served in order once it is.
  std::vector<bool> incoming;
  struct stashed {
    enum kind_t : uint8_t { a_push, an_init, a_pull } kind;
    chunk_push push; // a_push, an_init
    chunk_pull pull; // a_pull
  };
  std::vector<stashed> stash;
  // Hyper-parameter changes prepared and not yet committed or dropped, by id
  // (actors/shard/hyper.hpp): steps of clocks at or past the lowest at_clock wait.
  std::map<uint64_t, hyper_change> pending_hyper;

  /// Whether (tensor, chunk), served here, still waits for its state from another shard.
  bool awaits(uint32_t tensor, uint32_t chunk) const {
    return !incoming.empty() && incoming[routes->local_index(tensor, chunk)];
  }
};

/// Everything a shard holds, kept outside the shard actor (its NUMA supervisor holds it
/// too) so that a shard that crashes is restarted with its chunks' state: its
/// successor adopts the book (chunk_shard.hpp, "Restart").
struct shard_book {
  std::unordered_map<uint32_t, shard_job> jobs;
  struct tombstone {
    errc code;
    std::string why;
  };
  std::map<uint32_t, tombstone> tombstones; // why a job id is gone
  // Finished jobs' chunks, oldest first, kept for checkpoints: at most
  // kept_finished_jobs of them, each until its release time (shard_settings).
  struct kept_job {
    uint32_t id;
    shard_job job;
    std::chrono::steady_clock::time_point release_at;
  };
  std::deque<kept_job> finished;
  shard_stats stats;
  int memory_numa = -1;
  // Pushes waiting to be served, lowest clock first (equal clocks in arrival order).
  std::multimap<uint64_t, chunk_push> backlog;
  /// The job whose chunks a handler was changing, set while it does: a shard that dies
  /// with it set may have left them half-changed, so that job cannot go on.
  std::optional<uint32_t> changing;
  uint32_t incarnation = 0; // shards that have held this book before the current one
};

/// Calls fn(tensor, chunk, state) for each chunk of `job` that shard `index` serves
/// (by job.routes), in (tensor, index) order, until fn returns false.
template <class Fn>
void for_each_chunk(shard_job& job, uint32_t index, Fn fn) {
  auto& routes = *job.routes;
  for (uint32_t t = 0; t < routes.num_tensors(); ++t)
    for (uint32_t c = 0; c < routes.layout(t).count(); ++c)
      if (routes.shard_of(t, c) == index
          && !fn(t, c, job.chunks[routes.local_index(t, c)]))
        return;
}

/// Lays out a new job's chunks of shard setup.shard_index: m, v and d where the
/// optimizer needs them, each chunk's arrays on a cache line, all allocated on `numa`
/// (the parameters in the shared segment, when the job has one, first touched here).
/// A restored job's chunks take their state from setup.restore, which must hold every
/// chunk of the shard, each fitting its chunk; throws std::runtime_error saying which
/// does not.
shard_job make_shard_job(job_setup& setup, std::shared_ptr<job_reports> coordinator,
                         uint32_t numa);

} // namespace rw::actors::detail
