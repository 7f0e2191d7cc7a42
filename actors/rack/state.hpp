#pragma once
// The rack coordinator's state, shared by the files of actors/rack/: rack_coordinator.cpp
// (admission: hello, proof, attach, leave; the behavior), jobs.cpp (a job's life on
// the node: grants from the cluster, status, stop, the end of a job and its report),
// and ranks, placement, balance, mirror, moves, checkpoint, hyper, steps and inject.

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include "actors/rack/rack_coordinator.hpp"
#include "actors/links/mirror_link.hpp"
#include "actors/links/rack_uplink.hpp"
#include "logic/rank_book.hpp"

namespace rw::actors::detail {

constexpr uint32_t no_rank = UINT32_MAX;

/// A job with chunks on the node (its first worker has joined).
struct job_info {
  uint32_t id = 0;
  job_spec spec;
  routing_ptr routes;
  // Its ranks: joined, connected, away or gone, their peers, attach tokens and proofs
  // (logic/rank_book.hpp).
  rank_book ranks;
  std::string created_by; // the host (IP address) whose hello created it
  std::shared_ptr<const transports::shm::mapping> params; // shared parameters, if any
  bool granted = false;       // created through the cluster (has a grant)
  bool hyper_pending = false; // a hyper-parameter change is being decided
  job_layout layout;          // its nodes (several: only the chunks homed here)
  // The ring version a takeover put it on (0: none): its shards kept their chunks and
  // count the pushes the ring before routed here, which its reroute tells the workers.
  uint64_t taken_over_at = 0;
  uint32_t node_index = 0; // this node among them
  bool internal = false;   // a hierarchical job's top level: no news to the cluster
  uint32_t init_rank = 0;  // the rank whose init sets version 0
  // A hierarchical job's rack part: each global rank's rank among this rack's workers
  // (no_rank: another rack's), the reverse, and the uplink to the top level.
  std::vector<uint32_t> local_rank;
  std::vector<uint32_t> global_rank;
  std::shared_ptr<rack_uplink> uplink;
  // A flat job on several nodes: each replicated chunk's step goes to its replica
  // first (actors/links/mirror_link).
  std::shared_ptr<mirror_link> mirror;
  // Periodic checkpoints (0: none): per clock, the chunks the shards sent so far and
  // how many shards did.
  uint64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  struct periodic_part {
    std::shared_ptr<runtime::checkpoint::chunk_file> file;
    size_t shards = 0;
  };
  std::map<uint64_t, periodic_part> periodic;
  // Moving (a drain; actors/rack/moves.cpp): the chunks that stay here, copied once
  // they settled, until the job is reshaped by its new ring.
  bool moving = false;
  std::vector<runtime::checkpoint::chunk_record> staying;
  // Joined by a move (rw.node_join): no shard holds it until the reshape creates it.
  bool arriving = false;
  // Step times (actors/rack/steps.cpp): each shard's clock of the job (step_atom), for
  // the shards holding its chunks by `clocked_routes`; the node's clock (their lowest),
  // when it last moved on, and the times between moves.
  routing_ptr clocked_routes;
  std::vector<uint64_t> shard_clock; // UINT64_MAX: the shard holds none of its chunks
  uint64_t clock = 0;
  std::chrono::steady_clock::time_point clock_at{};
  runtime::step_histogram steps;

  uint32_t shard_rank(uint32_t rank) const {
    return local_rank.empty() ? rank : local_rank[rank];
  }
  /// Whether `rank` joins on this node (a hierarchical job's rack part: its rack's).
  bool belongs(uint32_t rank) const {
    return local_rank.empty() || local_rank[rank] != no_rank;
  }
};

using binding_promise = caf::typed_response_promise<job_binding>;

/// A proved worker waiting to be admitted.
struct held_join {
  hello_request req;
  uint32_t id = 0;
  binding_promise rp;
};

/// A job the cluster coordinator placed on this node, from grant to deletion.
struct grant_info {
  uint32_t job_id = 0;
  job_spec spec;      // no tensors: the first worker declares them
  std::string secret; // the job's token
  job_layout layout;  // the job's nodes, in ring order
  std::string ended;  // "" while live, else finished, failed or stopped
  std::string reason;
  bool internal = false;  // a hierarchical job's top level, derived from the job's grant
  uint32_t init_rank = 0; // the rank whose init sets version 0
  /// A job placed at join: its top level's participants (the other racks' aggs) that
  /// proved the token before this node learnt the map, and so the top level's init
  /// rank (the rack of rank 0): admitted once it has (take_map), refused if it ends.
  std::vector<held_join> held_top;
  std::string restore;           // the checkpoint the job starts from ("": none)
  uint64_t checkpoint_every = 0; // periodic checkpoints (0: none) into checkpoint_dir
  std::string checkpoint_dir;
  uint64_t max_memory = 0; // the job's memory limit (0: --max-job-mib's)
  /// The node joins the running job (job_grant::joining): until the move's reshape
  /// makes it live here, hellos for it are refused as not yet served.
  bool joining = false;
};

struct rack_state {
  coordinator_settings settings;
  std::vector<chunk_shard_actor> shards;
  std::unordered_map<std::string, job_info> jobs;     // by name
  std::unordered_map<uint32_t, std::string> names;    // id -> name
  std::unordered_map<std::string, grant_info> grants; // by name
  std::deque<std::string> ended_grants;               // oldest first, to bound memory
  cluster_gateway link;        // the node's cluster link (null: not in a cluster)
  std::string cluster_address; // the cluster coordinator's control address
  std::string tenant_door;     // its tenant door ("": none)
  uint32_t next_open_id = open_job_ids; // jobs made by a worker on an --open-jobs node
  /// Checkpoints waiting on the shards, by hook id: each fails at once with the reason
  /// given (a shard crashed and cannot answer for its predecessor).
  std::map<uint64_t, std::function<void(const std::string&)>> checkpoint_aborts;
  uint64_t next_checkpoint_hook = 0;
  /// Requests to retry once shard `index`'s successor is known (replace_atom).
  std::map<uint32_t, std::vector<std::function<void()>>> on_shard_replaced;
  /// Every NIC poller of the node (told of a job's new routes when it moves).
  std::vector<caf::actor> pollers;
  /// In-node balancing (actors/rack/balance.cpp).
  struct balancer {
    std::vector<uint64_t> busy_ns; // each shard's CPU time at the last sample
    std::chrono::steady_clock::time_point sampled{};
    uint32_t busiest = UINT32_MAX; // the shard too busy in the last samples
    uint32_t streak = 0;           // in how many samples in a row
    bool moving = false;
    std::vector<std::function<void()>> deferred; // requests held while chunks move
    std::string last_refusal; // the last reason a busy shard gave nothing (logged once)
    bool report = false;      // log the shards' busy time at the next sample (a move ran)
    uint64_t moves = 0;       // chunk moves between shards so far (logged with each)
  } balance;
  /// Hyper-parameter changes prepared on the shards and not yet committed or dropped,
  /// by id (actors/rack/hyper.cpp); each is dropped by itself if nobody ends it in time.
  struct prepared_hyper {
    uint32_t job_id = 0;
    hyper_change change;
  };
  std::map<uint64_t, prepared_hyper> hyper;
  /// Periodic checkpoint files being written, by job id, and the job's end held until
  /// they are (the coordinator hears each file before the end, so a job deleted as soon
  /// as it finished keeps the checkpoints it took: rack/checkpoint.cpp).
  struct periodic_writes {
    uint32_t writing = 0;
    std::vector<job_event> held; // the job's end, sent once the last write is done
  };
  std::map<uint32_t, periodic_writes> writing;
  static inline const char* name = "rw.rack_coordinator";
};

using rack_ptr = rack_coordinator_actor::stateful_pointer<rack_state>;

job_binding refuse(errc code, std::string message);

/// The live job of id `job_id` (its first worker joined, it has not ended), or null.
inline job_info* live_job(rack_state& st, uint32_t job_id) {
  auto n = st.names.find(job_id);
  return n == st.names.end() ? nullptr : &st.jobs.at(n->second);
}

// --- rack/admission.cpp ------------------------------------------------------------
/// A worker's hello: refused, answered (an open job, a rank joining again), or held
/// for the proof of the job's token.
caf::result<job_binding> on_hello(rack_ptr self, hello_request& req);
/// The proof of the job's token for a held hello.
caf::result<job_binding> on_proof(rack_ptr self, proof_request& p);
/// A joined worker's connection to a further endpoint of the node.
job_binding on_attach(rack_ptr self, const attach_request& req);
/// The host part of a peer's "HOST:PORT" (what --max-open-jobs-per-peer counts by).
std::string peer_host(const std::string& peer);

// --- rack/create.cpp -----------------------------------------------------------------
/// A worker who may join (open job, or proved the token) joins or creates the job.
void admit(rack_ptr self, const hello_request& req, uint32_t id, binding_promise rp);

// --- rack/ranks.cpp ---------------------------------------------------------------
/// A worker joins `job` as `rank`: new, or again (a restarted process, or after bye).
/// The binding, or the refusal (a connected worker holds the rank).
job_binding join_rank(rack_ptr self, job_info& job, uint32_t rank,
                      const std::string& peer);
/// Answers a joined worker: `b` with where its rank goes on from (resume_clock: the
/// lowest clock of its pushes some shard has not counted).
void answer_with_resume(rack_ptr self, job_binding b, binding_promise rp);
/// One of a rank's connections closed (graceful: it said bye first).
void on_leave(rack_ptr self, uint32_t job_id, uint32_t rank, bool graceful,
              const std::string& reason);
/// A rank's rejoin window (its `departure`-th) closed: if it is still away, the job fails.
void on_rejoin_window(rack_ptr self, uint32_t job_id, uint32_t rank, uint32_t departure);
/// The binding of a joined rank (new or again) of `job`.
job_binding joined(const job_info& job, uint32_t rank, bool created);

// --- rack/placement.cpp ----------------------------------------------------------
/// A hello for a granted job, before the token: its rack option must name a rack of
/// the job; a hierarchical job's worker must be at its rack's agg (actors/cluster/rack_choice:
/// placed at join, or the job's fixed worker_racks). The refusal (moved, with the
/// agg's address; or a bad rack option), or nothing: the worker belongs here.
std::optional<job_binding> place_hello(rack_ptr self, const grant_info& g,
                                       const hello_request& req);
/// Whether the grant's workers are placed at join (their ranks bound as they come).
bool placed_at_join(const grant_info& g);
/// For a top level's grant: its job's grant if that is placed at join and this node
/// does not know the map yet (its participants wait in held_top); else null.
grant_info* unmapped_parent(rack_state& st, const grant_info& top);
/// A proved worker of a job placed at join: binds its rank to this rack at the cluster
/// coordinator, which answers once every rank is bound; then sets the map and admits.
void bind_then_admit(rack_ptr self, const hello_request& req, uint32_t id,
                     binding_promise rp);
/// A hello for a job this node does not hold: asks the cluster where the job lives and
/// sends the worker on (actors/cluster/rack_choice send_elsewhere); `refusal` if it has no
/// such job or cannot be asked.
caf::result<job_binding> send_on(rack_ptr self, const hello_request& req,
                                 job_binding refusal);

// --- rack/steps.cpp --------------------------------------------------------------
/// Shard `shard` has completed `clock` steps of job `job_id`: once every shard holding
/// its chunks has, the job's clock here moves on and the time since it last did is a
/// step time.
void on_step(rack_ptr self, uint32_t job_id, uint32_t shard, uint64_t clock);
/// Every live job of the node, for /metrics.
std::vector<job_gauge> job_gauges(const rack_state& st);

// --- rack/checkpoint.cpp ---------------------------------------------------------
/// This node's part of a checkpoint of job `job_id` at `clock` (UINT64_MAX: as the
/// chunks stand) into `dir`: its chunk file, as the manifest lists it.
caf::result<checkpoint_part> on_checkpoint(rack_ptr self, uint32_t job_id, uint64_t clock,
                                           const std::string& dir);
/// A shard's copies of a periodic checkpoint of job `job_id` at `clock`: once every
/// shard holding chunks of the job has sent its own, the node's file is written into
/// checkpoint_dir/clock-NNNNNNNNNN and its entry goes to the cluster (checkpoint_atom).
void on_periodic(rack_ptr self, uint32_t job_id, uint64_t clock, chunk_snapshot& snap);
/// Reports a job's end to the cluster now, or, while periodic checkpoint files of the
/// job are being written, once the last is (its entry reaches the cluster first).
void report_end(rack_ptr self, job_event ev);
/// A periodic checkpoint file of job `cluster_id` is written (or failed) and its entry
/// sent: the job's held end goes to the cluster after the last.
void periodic_written(rack_ptr self, uint32_t cluster_id);
/// A restored job's chunks homed here (by `routes`), per shard, from the checkpoint in
/// `dir`; "" or why they cannot be (a bad manifest or file, a spec that differs).
std::string load_restore(
  const std::string& dir, const job_spec& spec, const runtime::routing_table& routes,
  std::vector<std::vector<runtime::checkpoint::chunk_record>>& per_shard);

// --- rack/inject.cpp -------------------------------------------------------------
/// Fault injection into job `job_id`'s part here (rw.inject): kill "shard" crashes
/// shard `index`; kill "link" closes the connections of the job's worker rank `index`
/// (UINT32_MAX: every rank), as a cut link would. What was done, or why not.
caf::result<std::string> on_inject(rack_ptr self, uint32_t job_id,
                                   const std::string& kill, uint32_t index);

// --- rack/mirror.cpp -------------------------------------------------------------
/// A hello from another node's mirror link (Hello.mirror): refused, or answered with
/// a challenge (the link proves the job's token).
job_binding mirror_hello(rack_ptr self, const hello_request& req);
/// Its proof: the connection is bound to the job as protocol::mirror_rank (no rank
/// of the job; its pushes are the sums of the chunks replicated here).
job_binding mirror_proof(rack_ptr self, const proof_request& p);
/// A flat job on several nodes: its mirror link, made (and started) if it has none,
/// told the ring of `layout` before any shard routes by it.
void mirror_ring(rack_ptr self, job_info& job, const job_layout& layout);

// --- rack/moves.cpp --------------------------------------------------------------
/// A flat BSP job moves to the ring of `next` (a node drained): its chunks here settle
/// at a clock boundary and freeze; those homed elsewhere on the new ring are the answer,
/// a chunk file per node; the others are kept for reshape.
caf::result<chunk_moves> on_fence(rack_ptr self, uint32_t job_id, const job_layout& next);
/// The moved job's chunks here become those `next` homes here: the kept ones and the
/// ones moved here (`incoming`); the pollers route its connections by the new table.
/// A node joining the job (its grant says so) holds it from here on, no worker yet.
caf::result<ok_atom> on_reshape(rack_ptr self, uint32_t job_id, const job_layout& next,
                                const chunk_moves& incoming);
/// Every node of the moved job is reshaped: its workers hear the new ring (a `reroute`
/// frame on each connection). A node `next` does not list lets the job go quietly.
caf::result<ok_atom> on_reroute(rack_ptr self, uint32_t job_id, const job_layout& next);
/// The move was given up: the job serves again as it stood, and its workers send again
/// what was dropped meanwhile. A node that was joining it lets it go.
caf::result<ok_atom> on_thaw(rack_ptr self, uint32_t job_id);
/// A node of the job (replicas = 1) died: the shards go on by the ring of `next`, each
/// chunk's state kept where it is (a replica of the dead node's becomes the home).
caf::result<ok_atom> on_takeover(rack_ptr self, uint32_t job_id, const job_layout& next);

/// Tells every poller of the node a job's routes (route_change); then() once all have
/// taken them (a poller that does not answer in time is logged and not waited for).
void tell_pollers(
  rack_ptr self, route_change rc, std::function<void()> then = [] {});

// --- rack/balance.cpp ------------------------------------------------------------
/// One balancing sample (balance_atom): each shard's busy time since the last; the
/// next sample is scheduled (nothing when settings.balance_interval is 0).
void on_balance(rack_ptr self);

// --- rack/hyper.cpp ------------------------------------------------------------------

/// Prepares hyper-parameter change `id` on every shard of the job (their steps of
/// clocks >= at_clock wait); answers the highest version of the job's chunks here.
caf::result<uint64_t> on_hyper_prepare(rack_ptr self, uint32_t job_id, uint64_t id,
                                       const hyper_change& change);
/// Commits (apply) or drops prepared change `id` on every shard.
caf::result<ok_atom> on_hyper_end(rack_ptr self, uint32_t job_id, uint64_t id,
                                  bool apply);
/// Rank 0's worker asks for a change: through the cluster (every node of the job), or,
/// for an open job, prepared and committed on this node's shards.
caf::result<uint64_t> on_hyper_request(rack_ptr self, uint32_t job_id,
                                       const hyper_change& change);

/// A request that must not run while chunks move between the node's shards (fence,
/// reshape, reroute, thaw, takeover, checkpoint): while a move runs, the promise of its
/// answer, the request being asked again of this actor once the move ends; nothing
/// otherwise (serve it now).
template <class R, class... Ts>
std::optional<caf::typed_response_promise<R>> after_balancing(rack_ptr self, Ts... xs) {
  auto& b = self->state.balance;
  if (!b.moving)
    return std::nullopt;
  auto rp = self->make_response_promise<R>();
  b.deferred.push_back([self, rp, xs...]() mutable {
    self->request(caf::actor_cast<rack_coordinator_actor>(self), caf::infinite, xs...)
      .then([rp](R& r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  });
  return rp;
}

// --- rack/jobs.cpp ---------------------------------------------------------------
/// A job that moved away from this node ends here without news to the cluster (it lives
/// on): its chunks are dropped and a hello for it is sent on to where it lives.
void let_go(rack_ptr self, uint32_t job_id, const std::string& why);
/// Takes a grant from the cluster (refused if a live job has the name).
caf::result<ok_atom> on_grant(rack_ptr self, job_grant& g);
/// A job's live status (ranks with counts), or its end, for the cluster.
caf::result<job_event> on_status(rack_ptr self, uint32_t job_id);
/// Stops a job by an operator's request, or (failed) because it failed on another of
/// its nodes: its workers get errc::stopped, or errc::unavailable with the reason.
caf::result<ok_atom> on_halt(rack_ptr self, uint32_t job_id, const std::string& reason,
                             bool failed = false);
/// Fails every granted job but those in `keep` (the node registered again: the cluster
/// coordinator holds only those live on it).
void on_halt_all(rack_ptr self, const std::vector<uint32_t>& keep,
                 const std::string& reason);
/// Tells the cluster a granted job started.
void report_start(rack_ptr self, const job_info& job);
/// Ends a job: reports it to the cluster with its final counts (if granted; once its
/// periodic checkpoint files being written are, see report_end), then aborts it on the
/// shards (state failed or stopped) or drops it (finished).
void end_job(rack_ptr self, uint32_t job_id, const std::string& state, errc code,
             const std::string& why);

} // namespace rw::actors::detail
