#include "actors/cluster/cluster_coordinator.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/node/caf_peer_sweep.hpp"
#include "actors/cluster/state.hpp"
#include "runtime/credentials.hpp"

namespace rw::actors {

namespace detail {

caf::expected<std::pair<caf::node_id, runtime::byte_vector>> take_challenge(
  cluster_ptr self) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  if (!sender)
    return cluster_error(errc::unauthorized, "an anonymous sender cannot prove a secret");
  auto nonce = st.challenges.take(sender->node());
  if (!nonce)
    return cluster_error(
      errc::unauthorized,
      fmt::format("a proof without a challenge (or one answered later than "
                  "{} ms): ask (auth) first",
                  st.challenges.ttl().count()));
  auto* p = reinterpret_cast<const std::byte*>(nonce->data());
  return std::pair<caf::node_id, runtime::byte_vector>{sender->node(),
                                                       {p, p + nonce->size()}};
}

uint64_t unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
}

} // namespace detail

namespace {

using namespace detail;

runtime::byte_vector bytes_of(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

caf::error untrusted(cluster_ptr self, const char* what) {
  log_refusal(self, what,
              fmt::format("{}: the sender has not proved the cluster secret", what));
  return cluster_error(
    errc::unauthorized,
    "this cluster wants its secret: give the same --cluster-secret-file "
    "as the coordinator's (a tenant speaks through the tenant door: rw-shell --tenant)");
}

caf::result<std::string> on_challenge(cluster_ptr self) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  if (!sender)
    return cluster_error(errc::unauthorized,
                         "an anonymous sender cannot prove the secret");
  // No secret here: an empty challenge says so, and a peer that holds one warns that
  // it protects nothing (any proof is taken).
  std::string text;
  if (!st.settings.secret.empty()) {
    auto nonce = runtime::make_nonce();
    text.assign(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  }
  if (!st.challenges.hand_out(sender->node(), text)) {
    log_refusal(self, "auth",
                fmt::format("auth: {} challenges handed out in the last {} ms are "
                            "unanswered; this asker is refused for now",
                            st.challenges.capacity(), st.challenges.ttl().count()));
    return cluster_error(errc::too_many_requests,
                         "the coordinator has too many unanswered challenges: try again "
                         "shortly");
  }
  return text;
}

// Asks the middleman which connection each of `nodes` is on; the answer comes back as
// an untrust_atom message (on_connections).
void look_at_connections(cluster_ptr self, std::vector<caf::node_id> nodes) {
  auto me = caf::actor_cast<caf::actor>(self);
  detail::peer_connections(self->system(), std::move(nodes),
                           [me](std::vector<caf::node_id> n, std::vector<int64_t> ids) {
                             caf::send_as(me, me, untrust_atom::value, std::move(n),
                                          std::move(ids));
                           });
}

// Trust ends with the connection a process proved the secret on: gone, or replaced by
// another one (a process announcing the same CAF node id anew proves it again).
void on_connections(cluster_ptr self, const std::vector<caf::node_id>& nodes,
                    const std::vector<int64_t>& ids) {
  auto& trusted = self->state.trusted;
  size_t ended = 0;
  for (size_t i = 0; i < nodes.size() && i < ids.size(); ++i) {
    auto it = trusted.find(nodes[i]);
    if (it == trusted.end())
      continue;
    if (it->second.connection == -1 && ids[i] != -1) {
      it->second.connection = ids[i]; // the connection it proved on
      continue;
    }
    if (ids[i] != it->second.connection) {
      trusted.erase(it);
      ++ended;
    }
  }
  if (ended > 0)
    spdlog::debug("control plane: {} process(es) that proved the cluster secret "
                  "disconnected: trust ended with their connection ({} trusted now)",
                  ended, trusted.size());
}

caf::result<ok_atom> on_proof(cluster_ptr self, const std::string& proof) {
  auto& st = self->state;
  auto challenge = take_challenge(self);
  if (!challenge)
    return std::move(challenge.error());
  auto& [node, nonce] = *challenge;
  if (st.settings.secret.empty()
      || runtime::verify_cluster(st.settings.secret, nonce, bytes_of(proof))) {
    st.trusted[node] = trust{};
    look_at_connections(self, {node}); // the one it proved on: trust lasts as long
    return ok_atom::value;
  }
  log_refusal(self, "proof", "a wrong proof of the cluster secret");
  return cluster_error(errc::unauthorized, "wrong cluster secret");
}

void drop_node(cluster_ptr self, uint32_t id, const std::string& why,
               bool graceful = false) {
  auto& st = self->state;
  auto it = st.nodes.find(id);
  if (it == st.nodes.end())
    return;
  auto name = it->second.info.name;
  self->demonitor(it->second.addr);
  st.nodes.erase(it);
  spdlog::log(graceful ? spdlog::level::info : spdlog::level::warn,
              "node left the cluster: node={} id={}: {}; {} node(s) remain", name, id,
              why, st.nodes.size());
  forget_probes(st, id);
  fail_jobs_on(self, id, fmt::format("node {} {}", name, why));
}

caf::result<node_admission> on_register(cluster_ptr self, node_info& info) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return cluster_error(errc::bad_frame,
                         "a node must register from its cluster link actor");
  if (info.name.empty() || info.endpoints.empty())
    return cluster_error(errc::invalid_spec,
                         "a node registers with a name and its endpoints");
  // A node that restarted or lost its connection was dropped when the connection
  // closed (or its heartbeats stopped): a live member with the name is another node.
  for (auto& [id, m] : st.nodes)
    if (m.info.name == info.name) {
      spdlog::warn("node refused: a node registered as '{}' while a live node (id {}, "
                   "endpoints [{}]) has that name",
                   info.name, id, fmt::join(m.info.endpoints, ", "));
      return cluster_error(
        errc::duplicate_name,
        fmt::format("a live node is already named '{}' (endpoints [{}]): "
                    "give each node its own --name",
                    info.name, fmt::join(m.info.endpoints, ", ")));
    }
  member m;
  m.info = std::move(info);
  bool returning = st.awaited.count(m.info.name) != 0; // a restored job's node
  m.info.id = admit_node_id(st, m.info.name);
  m.link = caf::actor_cast<node_link_actor>(sender);
  m.addr = caf::actor_cast<caf::actor_addr>(sender);
  m.last_seen = steady::now();
  self->monitor(sender);
  spdlog::info("node joined the cluster: node={} id={} role={} rack={} endpoints=[{}] "
               "shards={}; {} node(s) live",
               m.info.name, m.info.id, m.info.role, m.info.rack,
               fmt::join(m.info.endpoints, ", "), m.info.shards, st.nodes.size() + 1);
  auto id = m.info.id;
  st.nodes.emplace(id, std::move(m));
  node_admission out{id, live_jobs_on(st, id), st.settings.tenant_door};
  if (returning) // read-only questions: the answer above says what the node keeps
    reconcile_node(self, id);
  // Creations that waited for a node to place on (just after a restart) are tried
  // again once this answer is out: a grant sent before it, the node would fail.
  if (!st.placing_later.empty())
    self->send(self, create_atom::value);
  return out;
}

caf::result<ok_atom> on_heartbeat(cluster_ptr self, uint32_t id) {
  auto it = self->state.nodes.find(id);
  if (it == self->state.nodes.end())
    return cluster_error(
      errc::unknown_job,
      fmt::format("node id {} is not a member (it timed out): register "
                  "again",
                  id));
  it->second.last_seen = steady::now();
  return ok_atom::value;
}

std::vector<node_info> list_nodes(cluster_ptr self) {
  std::vector<node_info> out;
  auto now = steady::now();
  for (auto& [id, m] : self->state.nodes) {
    auto info = m.info;
    info.last_seen_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_seen).count());
    info.jobs = static_cast<uint32_t>(live_jobs_on(self->state, id).size());
    out.push_back(std::move(info));
  }
  return out;
}

void expire(cluster_ptr self) {
  auto& st = self->state;
  auto now = steady::now();
  std::vector<uint32_t> late;
  for (auto& [id, m] : st.nodes)
    if (now - m.last_seen > st.settings.node_timeout)
      late.push_back(id);
  for (auto id : late)
    drop_node(
      self, id,
      fmt::format("sent no heartbeat for {} ms", st.settings.node_timeout.count()));
  expire_awaited(self);
}

cluster_coordinator_actor::behavior_type cluster_behavior(cluster_ptr self,
                                                          cluster_settings settings) {
  self->state.settings = settings;
  // Job ids stay below open_job_ids (2^31): a random start in [1, 2^30).
  // Below 2^29: a hierarchical job's top level takes id + top_job_id_offset (2^30),
  // and ids from 2^31 up are open jobs'.
  self->state.next_job_id = 1 + static_cast<uint32_t>(runtime::random_u64() % (1u << 29));
  self->state.started = steady::now();
  restore_registry(self);
  start_store_writer(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& [id, m] : self->state.nodes)
      if (m.addr == dm.source) {
        drop_node(self, id, "vanished (its connection to the coordinator closed)");
        return;
      }
  });
  auto scan = settings.node_timeout / 4;
  self->delayed_send(self, scan, tick_atom::value);
  return {
    [=](auth_atom) { return on_challenge(self); },
    [=](auth_atom, const std::string& proof) { return on_proof(self, proof); },
    [=](register_atom, node_info& info) -> caf::result<node_admission> {
      if (!heard(self))
        return untrusted(self, "register");
      return on_register(self, info);
    },
    [=](heartbeat_atom, uint32_t id) -> caf::result<ok_atom> {
      if (!heard(self))
        return untrusted(self, "heartbeat");
      return on_heartbeat(self, id);
    },
    [=](leave_atom, uint32_t id) {
      if (!heard(self))
        untrusted(self, "leave");
      else
        drop_node(self, id, "left (it is stopping)", true);
    },
    [=](event_atom, uint32_t node_id, job_event& ev) {
      if (!heard(self))
        untrusted(self, "job event");
      else
        on_event(self, node_id, ev);
    },
    // Shells: an operator's (who sees every job) over the middleman, a tenant's (who
    // sees only its own) through the tenant door (actors/door).
    [=](caf::get_atom, nodes_atom) -> caf::result<std::vector<node_info>> {
      if (!heard(self))
        return untrusted(self, "nodes");
      return list_nodes(self);
    },
    [=](caf::get_atom, jobs_atom) -> caf::result<std::vector<job_report>> {
      if (!heard(self))
        return untrusted(self, "jobs");
      return shell_jobs(self, {});
    },
    [=](create_atom, job_spec& spec,
        const job_placement& placement) -> caf::result<job_created> {
      if (!heard(self))
        return untrusted(self, "job create");
      return shell_create(self, {}, sender_of(self), spec, placement);
    },
    [=](status_atom, const std::string& name) -> caf::result<job_report> {
      if (!heard(self))
        return untrusted(self, "job status");
      return shell_status(self, {}, name);
    },
    [=](hyper_atom, const std::string& name,
        const hyper_change& change) -> caf::result<uint64_t> {
      if (!heard(self))
        return untrusted(self, "job set");
      return shell_set(self, {}, name, change);
    },
    [=](stop_atom, const std::string& name) -> caf::result<job_report> {
      if (!heard(self))
        return untrusted(self, "job stop");
      return shell_stop(self, {}, sender_of(self), name);
    },
    [=](remove_atom, const std::string& name) -> caf::result<ok_atom> {
      if (!heard(self))
        return untrusted(self, "job delete");
      return shell_remove(self, {}, sender_of(self), name);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string&, caf::get_atom,
        nodes_atom) -> caf::result<std::vector<node_info>> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's nodes");
      return list_nodes(self);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string&, caf::get_atom,
        jobs_atom) -> caf::result<std::vector<job_report>> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's jobs");
      return shell_jobs(self, tenant);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string& where, create_atom, job_spec& spec,
        const job_placement& placement) -> caf::result<job_created> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's job create");
      return shell_create(self, tenant, where, spec, placement);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string&, status_atom,
        const std::string& name) -> caf::result<job_report> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's job status");
      return shell_status(self, tenant, name);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string&, hyper_atom, const std::string& name,
        const hyper_change& change) -> caf::result<uint64_t> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's job set");
      return shell_set(self, tenant, name, change);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string& where, stop_atom,
        const std::string& name) -> caf::result<job_report> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's job stop");
      return shell_stop(self, tenant, where, name);
    },
    [=](tenant_atom, const std::string& key, const std::string& tenant,
        const std::string& where, remove_atom,
        const std::string& name) -> caf::result<ok_atom> {
      if (!from_door(self, key, tenant))
        return untrusted(self, "a tenant's job delete");
      return shell_remove(self, tenant, where, name);
    },
    [=](where_atom, const std::string& name) -> caf::result<job_layout> {
      if (!heard(self))
        return untrusted(self, "job location");
      return where_job(self, name);
    },
    [=](bind_atom, const rank_binding& b) -> caf::result<rank_map> {
      if (!heard(self))
        return untrusted(self, "rank binding");
      return bind_rank(self, b);
    },
    [=](checkpoint_atom, const std::string& name, const std::string& dir,
        uint64_t clock) -> caf::result<checkpoint_info> {
      if (!heard(self))
        return untrusted(self, "checkpoint");
      return checkpoint_job(self, name, dir, clock);
    },
    [=](checkpoint_atom, uint32_t node_id, uint32_t job_id, uint64_t clock,
        checkpoint_part& part) {
      if (!heard(self))
        untrusted(self, "checkpoint part");
      else
        periodic_part(self, node_id, job_id, clock, part);
    },
    [=](drain_atom, const std::string& name) -> caf::result<std::string> {
      if (!heard(self))
        return untrusted(self, "draining a node");
      return drain_node(self, name);
    },
    [=](node_join_atom, const std::string& name) -> caf::result<std::string> {
      if (!heard(self))
        return untrusted(self, "joining a node to the running jobs");
      return join_node(self, name);
    },
    [=](inject_atom, const std::string& name, const std::string& kill,
        const std::string& node, uint32_t index) -> caf::result<std::string> {
      if (!heard(self))
        return untrusted(self, "fault injection");
      return inject_fault(self, name, kill, node, index);
    },
    [=](expire_atom, uint32_t job_id) {
      if (!heard(self))
        untrusted(self, "join timeout");
      else
        bindings_expired(self, job_id);
    },
    [=](replicate_atom, uint32_t job_id, uint64_t ring_version, uint32_t attempt) {
      if (!heard(self))
        untrusted(self, "replicas after a takeover");
      else
        replicate_again(self, job_id, ring_version, attempt);
    },
    [=](create_atom) { retry_placements(self); },
    [=](tick_atom) {
      expire(self);
      // Every shell session and Python call is a new CAF node: CAF 0.17.6 keeps a
      // helper per node it ever met unless told (caf_peer_sweep.hpp). The same look
      // finds the proven processes whose connection has gone.
      detail::forget_departed_peers(self->system());
      std::vector<caf::node_id> proven;
      for (auto& [node, t] : self->state.trusted)
        proven.push_back(node);
      look_at_connections(self, std::move(proven));
      self->delayed_send(self, scan, tick_atom::value);
    },
    [=](untrust_atom, std::vector<caf::node_id>& nodes, std::vector<int64_t>& ids) {
      if (!heard(self)) {
        untrusted(self, "trust changes");
        return;
      }
      on_connections(self, nodes, ids);
    },
  };
}

} // namespace

cluster_coordinator_actor spawn_cluster_coordinator(caf::actor_system& sys,
                                                    cluster_settings settings) {
  return sys.spawn(cluster_behavior, settings);
}

} // namespace rw::actors
