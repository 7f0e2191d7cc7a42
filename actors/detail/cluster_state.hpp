#pragma once
// The cluster coordinator's state, shared by its two halves: cluster_coordinator.cpp
// (membership: register, heartbeat, leave, nodes that vanish) and
// detail/cluster_jobs.cpp (the job registry: create, status, stop, delete, events).

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_map>

#include "actors/cluster_coordinator.hpp"

namespace rw::actors::detail {

using steady = std::chrono::steady_clock;

struct member {
  node_info info;
  node_link_actor link;
  caf::actor_addr addr;
  steady::time_point last_seen;
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
  /// requests, held until every rank is bound (detail/cluster_binding.cpp).
  std::vector<uint32_t> bound;
  std::vector<std::string> bound_why;
  std::vector<caf::typed_response_promise<rank_map>> waiting;

  bool on_node(uint32_t id) const {
    return std::find(node_ids.begin(), node_ids.end(), id) != node_ids.end();
  }
};

struct cluster_state {
  cluster_settings settings;
  std::map<uint32_t, member> nodes;                  // live, by id
  std::map<uint32_t, job_entry> jobs;                // by id: creation order
  std::unordered_map<std::string, uint32_t> by_name; // name -> id
  std::set<caf::node_id> trusted;                 // processes that proved the secret
  std::map<caf::node_id, std::string> challenges; // nonces handed out, by process
  uint32_t next_node_id = 1;
  uint32_t next_job_id = 1; // from a random start, so a restarted coordinator's ids
                             // do not meet the ones nodes remember from before
  static inline const char* name = "rw.cluster_coordinator";
};

using cluster_ptr = cluster_coordinator_actor::stateful_pointer<cluster_state>;

uint64_t unix_ms();

// --- cluster_placement.cpp ---------------------------------------------------------
/// The live nodes a new job goes to, in ring order (by rack, then name); empty with
/// `why` set when the placement cannot be met.
std::vector<const member*> place_job(const cluster_state& st, const job_placement& p,
                                     std::string& why);
/// How the job reduces across its nodes: sets layout.reduction, and for hierarchical
/// jobs layout.rank_racks, and layout.plan (why). False with `why` set when the
/// asked-for reduction cannot be had with this spec and placement.
bool choose_reduction(const job_spec& spec, const job_placement& p,
                      const std::vector<const member*>& nodes, job_layout& layout,
                      std::string& why);

// --- cluster_binding.cpp ----------------------------------------------------------
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

// --- cluster_jobs.cpp --------------------------------------------------------------
caf::result<job_created> create_job(cluster_ptr self, job_spec& spec,
                                    const job_placement& placement);
caf::result<job_report> job_status(cluster_ptr self, const std::string& name);
caf::result<job_report> stop_job(cluster_ptr self, const std::string& name);
caf::result<ok_atom> remove_job(cluster_ptr self, const std::string& name);
void on_event(cluster_ptr self, uint32_t node_id, job_event& ev);
/// Every live job on the node fails (the node left or vanished).
void fail_jobs_on(cluster_ptr self, uint32_t node_id, const std::string& why);
/// Job `id` fails (on the coordinator's own finding): marked failed, failed on its nodes.
void fail_job(cluster_ptr self, uint32_t id, const std::string& why);

} // namespace rw::actors::detail
