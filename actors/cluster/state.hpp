#pragma once
// The cluster coordinator's state, shared by its parts: cluster_coordinator.cpp
// (membership: register, heartbeat, leave, nodes that vanish),
// create.cpp (a job created: placed, granted), jobs.cpp (the job registry: status,
// stop, delete, the news nodes send),
// actors/cluster/placement.cpp (where a job goes, how it reduces) and
// actors/cluster/probes.cpp (measuring core links for `auto`).

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "actors/cluster/cluster_coordinator.hpp"
#include "actors/cluster/store_writer.hpp"
#include "logic/challenge_book.hpp"
#include "logic/refusal_log.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors::detail {

using steady = std::chrono::steady_clock;

struct member {
  node_info info;
  node_link_actor link;
  caf::actor_addr addr;
  steady::time_point last_seen;
  bool drained = false; // rw.node_drain: it takes no new jobs
};

struct job_entry {
  job_report report;
  std::string token;
  std::vector<uint32_t> node_ids; // every node of the job, in ring order
  /// What each node last said of the job: its state and its per-rank counts. A job on
  /// several nodes has finished once every node has; it fails when any node fails.
  std::map<uint32_t, job_event> node_news;
  /// A hierarchical job placed at join (layout.join_timeout_ms): each rank's node once
  /// a node has bound it (UINT32_MAX until then) and why, and the nodes' binding
  /// requests, held until every rank is bound (actors/cluster/binding.cpp).
  std::vector<uint32_t> bound;
  std::vector<std::string> bound_why;
  std::vector<caf::typed_response_promise<rank_map>> waiting;
  /// Checkpoints: the one the job started from, and periodic ones (every N clocks
  /// into checkpoint_dir; 0: none).
  std::string restore;
  uint64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  /// Periodic checkpoints' files written so far, by clock, by node name.
  std::map<uint64_t, std::vector<std::pair<std::string, checkpoint_part>>> periodic;
  /// The newest complete periodic checkpoint (its manifest written): where the job
  /// restarts from when one of its nodes dies (actors/cluster/recover.cpp). "": none.
  std::string last_checkpoint;
  uint64_t last_checkpoint_clock = 0;
  /// A hyper-parameter change is being decided (one at a time: actors/cluster/hyper.cpp).
  bool hyper_pending = false;

  bool on_node(uint32_t id) const {
    return std::find(node_ids.begin(), node_ids.end(), id) != node_ids.end();
  }
};

/// A process that proved the cluster secret: the middleman connection it proved it on
/// (its id; -1 until the first look at the routes).
struct trust {
  int64_t connection = -1;
};

/// One rate probe between two nodes' data planes (or why it failed).
struct core_probe {
  bool ok = false;
  double gbps = 0;
  uint64_t elapsed_us = 0;
  std::string from, to; // node names: `from` sent, `to` took the bytes
  std::string error;
  steady::time_point when;
};

/// The probes that touched each node of a job, by node id (only nodes with no
/// configured core rate are probed).
using core_probes = std::map<uint32_t, std::vector<core_probe>>;

/// Two nodes' ids, lower first: a probe's key in the cache.
using node_pair = std::pair<uint32_t, uint32_t>;

struct cluster_state {
  cluster_settings settings;
  std::map<uint32_t, member> nodes;                  // live, by id
  std::map<uint32_t, job_entry> jobs;                // by id: creation order
  std::unordered_map<std::string, uint32_t> by_name; // name -> id
  // Processes that proved the cluster secret: trust ends with the connection they
  // proved it on.
  std::map<caf::node_id, trust> trusted;
  // Nonces handed out, by process: at most 1024 unanswered, each for 10 s.
  challenge_book<caf::node_id> challenges{1024, std::chrono::seconds(10)};
  refusal_log refusals; // repeated refusals of one process, logged once a minute
  std::map<node_pair, core_probe> probe_cache; // measured, by node pair
  /// Probes under way, by node pair, and who waits for each.
  std::map<node_pair, std::vector<std::function<void(const core_probe&)>>> probing;
  /// Restored from the state database: the id each node a restored job lives on will
  /// get when it registers again, by name, until it does; and when this coordinator
  /// started (a node not back within node_timeout of it is gone).
  std::map<std::string, uint32_t> awaited;
  steady::time_point started = steady::now();
  /// Creations that found no node to place on while nodes were still awaited: tried
  /// again as each registers, answered once none is awaited (retry_placements).
  std::vector<std::function<void()>> placing_later;
  /// The state database's writer (null without one), the writes sent to it and done
  /// (they are done in order), and what waits for writes up to a number to be done.
  store_writer_actor writer;
  uint64_t writes_sent = 0;
  uint64_t writes_done = 0;
  std::deque<std::pair<uint64_t, std::function<void()>>> after_writes;
  uint32_t next_node_id = 1;
  uint32_t next_job_id = 1; // from a random start, so a restarted coordinator's ids
                            // do not meet the ones nodes remember from before (or,
                            // from a state database, where the last one left off)
  static inline const char* name = "rw.cluster_coordinator";
};

using cluster_ptr = cluster_coordinator_actor::stateful_pointer<cluster_state>;

uint64_t unix_ms();

// --- cluster_coordinator.cpp -------------------------------------------------------
/// Takes the nonce handed to the current message's sender (auth_atom): it answers one
/// proof. unauthorized for an anonymous sender or one never challenged.
caf::expected<std::pair<caf::node_id, runtime::byte_vector>> take_challenge(
  cluster_ptr self);

// --- cluster/shells.cpp -----------------------------------------------------------
/// A shell's requests about jobs: an operator's (`tenant` "": every job) or a tenant's
/// through the door (only its own, by the name it gives them); `where` is who asked.
caf::result<std::vector<job_report>> shell_jobs(cluster_ptr self,
                                                const std::string& tenant);
caf::result<job_created> shell_create(cluster_ptr self, const std::string& tenant,
                                      const std::string& where, job_spec& spec,
                                      const job_placement& placement);
caf::result<job_report> shell_status(cluster_ptr self, const std::string& tenant,
                                     const std::string& name);
caf::result<uint64_t> shell_set(cluster_ptr self, const std::string& tenant,
                                const std::string& name, const hyper_change& change);
caf::result<job_report> shell_stop(cluster_ptr self, const std::string& tenant,
                                   const std::string& where, const std::string& name);
caf::result<ok_atom> shell_remove(cluster_ptr self, const std::string& tenant,
                                  const std::string& where, const std::string& name);

// --- cluster/tenants.cpp ----------------------------------------------------------
/// Whether the current message's sender is heard as an operator or a node: no secret,
/// this process (the tenant door among it), or a process that proved the cluster secret
/// on the connection it is on. Tenants never are: they speak through the door.
bool heard(cluster_ptr self);
/// Whether a (tenant_atom, key, tenant, ...) request comes from the tenant door: `key`
/// is the door's (settings.door_key, compared in constant time; never the sender's
/// node id, which a BASP peer names freely), and `tenant` is one of the --tenants-file
/// (the door forwards only tenants it saw prove their secret).
bool from_door(cluster_ptr self, const std::string& key, const std::string& tenant);
/// Who asked, for the log: "an operator at WHERE" or "tenant 'T' at WHERE".
std::string asker(const std::string& tenant, const std::string& where);
/// The current message's sender for logs: "HOST:PORT (CAF node N)" over the middleman,
/// "this process", or "(anonymous)".
std::string sender_of(cluster_ptr self);
/// Logs a refusal of the current sender at warn, once a minute per sender and `what`
/// (logic/refusal_log.hpp): `line` is the message, the sender's address goes after it.
void log_refusal(cluster_ptr self, const std::string& what, const std::string& line);
/// Whether job `job` is in what `tenant` sees ("": everything).
bool visible_to(const std::string& tenant, const std::string& job);
/// The registry's name of the job `tenant` calls `name` (a tenant may leave out its
/// "TENANT:" prefix); unknown_job, naming only the jobs it sees, for one it does not.
caf::expected<std::string> job_for(cluster_ptr self, const std::string& tenant,
                                   const std::string& name);
/// A creation by `tenant` ("": an operator): puts a tenant's job in its namespace, and
/// refuses what a tenant may not ask (checkpoint paths) and what exceeds the quotas of
/// the job's tenant (quota_refusal).
caf::error admit_create(cluster_ptr self, const std::string& tenant, job_spec& spec,
                        const job_placement& placement);
/// Why job `spec` (named in its tenant's namespace) exceeds that tenant's quotas with
/// the live jobs there are (none if it does not, or it is no tenant's). A job reserves
/// its `memory` on each of its nodes: on `nodes` of them (0: as many as the placement
/// names, at least one; the job's own once it is placed).
caf::error quota_refusal(const cluster_state& st, const job_spec& spec,
                         const job_placement& placement, size_t nodes = 0);

// --- cluster/placement.cpp ---------------------------------------------------------
/// The live nodes a new job goes to, in ring order (by rack, then name); empty with
/// `why` set when the placement cannot be met.
std::vector<const member*> place_job(const cluster_state& st, const job_placement& p,
                                     std::string& why);
/// Why hierarchical reduction cannot run this job on these nodes ("" if it can).
std::string hierarchical_refusal(const job_spec& spec,
                                 const std::vector<const member*>& nodes);
/// How the job reduces across its nodes: sets layout.reduction, and for hierarchical
/// jobs layout.rank_racks, and layout.plan (why, with auto's numbers and where each
/// came from: configured, probed (`probes`), NIC speed or assumed). False with `why`
/// set when the asked-for reduction cannot be had with this spec and placement.
bool choose_reduction(const job_spec& spec, const job_placement& p,
                      const std::vector<const member*>& nodes, const core_probes& probes,
                      job_layout& layout, std::string& why);

// --- cluster/probes.cpp ------------------------------------------------------------
/// Whether auto's plan for this job needs core rates measured: auto over several
/// racks, hierarchical possible, and some node without a configured core rate.
bool wants_core_probes(const job_spec& spec, const job_placement& p,
                       const std::vector<const member*>& nodes);
/// Has each node lacking a configured core rate probe its successor on the ring (in
/// `nodes` order), reusing results younger than defaults::probe_cache_ms (failures:
/// probe_retry_ms) and probes already under way, and calls done(probes) once every
/// probe has answered or failed (within probe_timeout_ms + node_request_timeout).
void probe_core_links(cluster_ptr self, const std::vector<const member*>& nodes,
                      const std::string& job, std::function<void(core_probes)> done);
/// Forgets the probes of a node that left (its next registration has a new id).
void forget_probes(cluster_state& st, uint32_t node_id);

// --- cluster/binding.cpp ----------------------------------------------------------
/// Where job `name` lives (a live job's layout), for a node that got a hello for a job
/// it does not hold.
caf::result<job_layout> where_job(cluster_ptr self, const std::string& name);
/// Binds a rank of a job placed at join to a rack; answers with the whole map once
/// every rank is bound (held until then, bounded by the job's join timeout).
caf::result<rank_map> bind_rank(cluster_ptr self, const rank_binding& b);
/// The join timeout of job `id` ran out: if ranks are missing, the job fails.
void bindings_expired(cluster_ptr self, uint32_t id);
/// Answers the held binding requests of a job that ended with `why`.
void release_bindings(job_entry& j, const std::string& why);

// --- cluster/persist.cpp ------------------------------------------------------------
/// Takes the registry restored from the state database (settings.restored): its jobs,
/// the next job id, and an id kept for each node a live job lives on (st.awaited).
void restore_registry(cluster_ptr self);
/// Spawns the state database's writer (none without --state-db).
void start_store_writer(cluster_ptr self);
/// Records job `id` as it is now in the state database (nothing without one), on the
/// writer's thread: the coordinator goes on meanwhile. Writes are applied in the order
/// they are sent. `done` hears "" once the write is durable, else why not (logged);
/// without a state database it hears "" at once.
void save_job(cluster_ptr self, uint32_t id,
              std::function<void(const std::string&)> done = {});
/// Records the next job id (ids taken by creations that failed are not reused).
void save_next_job_id(cluster_ptr self);
/// Deletes job `id` from the state database.
void unsave_job(cluster_ptr self, uint32_t id);
/// Runs `fn` once every write sent so far is done (at once when none is pending): a
/// shell hears of a transition only once it is recorded.
void after_recorded(cluster_ptr self, std::function<void()> fn);
/// Delivers `value` to `rp` once every write sent so far is done.
template <class Promise, class T>
void deliver_when_recorded(cluster_ptr self, Promise rp, T value) {
  after_recorded(
    self, [rp, value = std::move(value)]() mutable { rp.deliver(std::move(value)); });
}
/// Answers `value` once every write sent so far is done.
template <class T>
caf::result<T> when_recorded(cluster_ptr self, T value) {
  if (self->state.writes_done >= self->state.writes_sent)
    return value;
  auto rp = self->make_response_promise<T>();
  deliver_when_recorded(self, rp, std::move(value));
  return rp;
}
/// The id a registering node gets: the one kept for its name by a restored job, else a
/// new one.
uint32_t admit_node_id(cluster_state& st, const std::string& name);
/// The live jobs placed on node `id`.
std::vector<uint32_t> live_jobs_on(const cluster_state& st, uint32_t id);
/// A node came back after the coordinator restarted: asks it about each live job it
/// has a place in, and goes on as it says (see cluster_coordinator.hpp).
void reconcile_node(cluster_ptr self, uint32_t node_id);
/// Nodes of restored jobs not back within node_timeout of the start: their jobs fail.
void expire_awaited(cluster_ptr self);
// --- cluster/jobs.cpp (shared) ----------------------------------------------------
/// Fails job `job_id` on the nodes `ids`, without waiting for them.
void halt_on(cluster_ptr self, const std::vector<uint32_t>& ids, uint32_t job_id,
             const std::string& why);
/// The registered job named `name` (live or ended, not deleted), or null.
job_entry* job_named(cluster_ptr self, const std::string& name);

// --- cluster/create.cpp ------------------------------------------------------------
/// The layout of a job on `nodes` (names, addresses, racks; nothing else set).
job_layout layout_of(const std::vector<const member*>& nodes);

// --- cluster/recover.cpp ----------------------------------------------------------
/// Node `dead` of job `id` died with `why`: if the job is flat, has a complete periodic
/// checkpoint and live nodes left, it ends on them and starts again from the
/// checkpoint on them (a new id, the same name and token; its workers join again and
/// go on from the checkpoint's clock). Returns false when it cannot (the job fails).
bool restart_from_checkpoint(cluster_ptr self, uint32_t id, uint32_t dead,
                             const std::string& why);

// --- cluster/takeover.cpp ---------------------------------------------------------
/// Node `dead` of job `id` died with `why`: if the job keeps replicas (flat, BSP,
/// replicas = 1) and its other nodes are live, they take over its chunks and it goes on
/// (its workers are not restarted). Returns false when it cannot.
bool take_over(cluster_ptr self, uint32_t id, uint32_t dead, const std::string& why);
/// A job taken over on ring `from` gets its replicas back (attempt `attempt`): a move to
/// the same nodes with replicas = 1, unless it ended, moved or lost a node meanwhile.
void replicate_again(cluster_ptr self, uint32_t id, uint64_t from, uint32_t attempt);

// --- cluster/move.cpp -------------------------------------------------------------
/// Job `j`'s layout without node `node_id` (its ids left, in ring order, in `kept`),
/// the ring version one up; everything else as it is.
job_layout layout_without(const job_entry& j, uint32_t node_id,
                          std::vector<uint32_t>& kept);
/// Moves running job `id` to the layout `next` (its nodes `kept`, by id, in ring
/// order), `what` saying why in the logs; done(line, moved) once it has, or not.
void move_job_to(cluster_ptr self, uint32_t id, job_layout next,
                 std::vector<uint32_t> kept, std::string what,
                 std::function<void(std::string, bool)> done);

/// Why running job `j` cannot move between nodes ("" if it can): not running, on one
/// node, hierarchical, not BSP.
std::string unmovable(const job_entry& j);
/// The live node named `name`, or null.
member* live_node(cluster_state& st, const std::string& name);
/// `call`'s error for a node name that no live node has (naming the live ones).
caf::error no_live_node(const cluster_state& st, const char* call,
                        const std::string& name);

/// Jobs moved one after another for one node (a drain, a join); the promise answered
/// with summary(run, elapsed ms) once every job moved or stayed.
struct moves_run {
  std::string node;
  std::vector<uint32_t> todo; // jobs to move, in id order
  std::vector<std::string> moved;
  std::vector<std::string> stayed;
  caf::typed_response_promise<std::string> rp;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// Starts moving job `id` (done(line, moved) once it has or not); false if it has
  /// nothing to move any more.
  std::function<bool(uint32_t, std::function<void(std::string, bool)>)> move_one;
  std::function<std::string(const moves_run&, int64_t)> summary;
};
/// Moves `run`'s jobs one after another (a job that ended meanwhile, or whose node left
/// the cluster, is skipped), then answers its promise.
void run_moves(cluster_ptr self, std::shared_ptr<moves_run> run);

// --- cluster/drain.cpp ------------------------------------------------------------
/// rw.node_drain: what moved off the node and what stayed, or a clear error.
caf::result<std::string> drain_node(cluster_ptr self, const std::string& name);

// --- cluster/join.cpp -------------------------------------------------------------
/// rw.node_join: what moved onto the node and what stayed, or a clear error.
caf::result<std::string> join_node(cluster_ptr self, const std::string& name);

// --- cluster/checkpoint.cpp -------------------------------------------------------
/// Fault injection (actors/cluster/inject.cpp): what was done, or a clear error.
caf::result<std::string> inject_fault(cluster_ptr self, const std::string& name,
                                      const std::string& kill, const std::string& node,
                                      uint32_t index);
/// A checkpoint of job `name` into `dir` at `clock` (0: the coordinator picks one; see
/// cluster_coordinator.hpp).
caf::result<checkpoint_info> checkpoint_job(cluster_ptr self, const std::string& name,
                                            const std::string& dir, uint64_t clock);
/// A job created with restore = dir: why it cannot start from it ("" if it can, as
/// far as the spec without tensors tells; the nodes check the tensors).
std::string check_restore(job_spec& spec, const std::string& dir);
/// Node `node_id` wrote its file of job `id`'s periodic checkpoint at `clock`: once
/// every node of the job has, the manifest is written.
void periodic_part(cluster_ptr self, uint32_t node_id, uint32_t id, uint64_t clock,
                   checkpoint_part& part);

/// `by`: who asked (for the log line): "an operator at HOST:PORT (CAF node N)".
/// Just after a restart from the state database, a job that finds no node to place
/// on while nodes are awaited waits for them (placing_later), bounded by node_timeout.
caf::result<job_created> create_job(cluster_ptr self, job_spec& spec,
                                    const job_placement& placement,
                                    const std::string& by);
/// A node registered, or the wait for awaited nodes ended: the creations held for them
/// are placed now, or held again while nodes are still awaited, or refused.
void retry_placements(cluster_ptr self);

// --- cluster/jobs.cpp --------------------------------------------------------------
caf::result<job_report> job_status(cluster_ptr self, const std::string& name);
caf::result<job_report> stop_job(cluster_ptr self, const std::string& name);
/// rw.job_set: changes the job's hyper-parameters from change.at_clock on, on every node
/// of the job at once or nowhere (actors/cluster/hyper.cpp); answers the highest clock
/// the job's chunks had reached.
caf::result<uint64_t> set_hyper(cluster_ptr self, const std::string& name,
                                const hyper_change& change);
caf::result<ok_atom> remove_job(cluster_ptr self, const std::string& name);
void on_event(cluster_ptr self, uint32_t node_id, job_event& ev);
/// Every live job on the node fails (the node left or vanished).
void fail_jobs_on(cluster_ptr self, uint32_t node_id, const std::string& why);
/// Job `id` fails (on the coordinator's own finding): marked failed, failed on its nodes.
void fail_job(cluster_ptr self, uint32_t id, const std::string& why);

} // namespace rw::actors::detail
