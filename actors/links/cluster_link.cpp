#include "actors/links/cluster_link.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/links/cluster_connect.hpp"
#include "actors/node/control_tls.hpp"
#include "actors/links/rate_prober.hpp"
#include "transports/tcp/address.hpp"

namespace rw::actors {

namespace {

struct link_state {
  link_settings settings;
  rack_coordinator_actor rack;
  cluster_coordinator_actor coordinator; // null until found
  std::string address;                   // its control address
  uint32_t node_id = 0;                  // 0: not registered
  bool registering = false;
  uint32_t failures = 0;   // failed attempts in a row, for the log
  bool was_member = false; // registered before (this is a rejoin)
  static inline const char* name = "rw.cluster_link";
};

using link_ptr = cluster_link_actor::stateful_pointer<link_state>;

void lost(link_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.node_id != 0)
    spdlog::warn("cluster: lost the coordinator at {}: {}; registering again", st.address,
                 why);
  st.node_id = 0;
  if (!st.settings.embedded && st.coordinator) {
    self->demonitor(st.coordinator.address());
    st.coordinator = nullptr;
  }
}

// An attempt to reach or register failed; the next heartbeat tick tries again.
void attempt_failed(link_ptr self, const std::string& why) {
  auto& st = self->state;
  st.registering = false;
  if (st.failures++ % 10 == 0)
    spdlog::warn(
      "cluster: cannot register with the coordinator{}: {} (retrying every {} ms)",
      st.settings.via.empty() ? std::string{} : " through " + st.settings.via, why,
      st.settings.heartbeat.count());
  lost(self, why);
}

void do_register(link_ptr self) {
  auto& st = self->state;
  self
    ->request(st.coordinator, st.settings.request_timeout, register_atom::value,
              st.settings.node)
    .then(
      [self](node_admission& admitted) {
        auto& st = self->state;
        auto id = admitted.node_id;
        st.registering = false;
        st.node_id = id;
        st.failures = 0;
        // The coordinator failed what this node held but the jobs it still lists (it
        // restarted from its state database): so do we. A fresh node holds nothing.
        if (st.was_member || !admitted.live_jobs.empty())
          self->send(st.rack, halt_atom::value, std::move(admitted.live_jobs),
                     std::string{"the cluster coordinator lost this node and failed its "
                                 "jobs"});
        st.was_member = true;
        self->send(st.rack, locate_atom::value, st.address,
                   std::move(admitted.tenant_door));
        spdlog::info("cluster: registered with the coordinator at {} as node {} (id {})",
                     st.address, st.settings.node.name, id);
      },
      [self](caf::error& err) {
        attempt_failed(self,
                       fmt::format("the coordinator at {} did not register this node: "
                                   "{}",
                                   self->state.address, describe(self->system(), err)));
      });
}

// With a cluster secret, proves it (this process) before registering.
void prove_then_register(link_ptr self) {
  auto& st = self->state;
  if (st.settings.secret.empty()) {
    do_register(self);
    return;
  }
  auto refused = [self](caf::error& err) {
    attempt_failed(self, fmt::format("the coordinator at {} did not accept the cluster "
                                     "secret: {}",
                                     self->state.address, describe(self->system(), err)));
  };
  self->request(st.coordinator, st.settings.request_timeout, auth_atom::value)
    .then(
      [self, refused](std::string& nonce) {
        auto& st = self->state;
        if (nonce.empty())
          spdlog::warn("cluster: the coordinator at {} asks for no cluster secret: this "
                       "node's --cluster-secret-file protects nothing, and anyone who "
                       "reaches the control address can register nodes and create, stop "
                       "or delete jobs (give the coordinator the same file)",
                       st.address);
        self
          ->request(st.coordinator, st.settings.request_timeout, auth_atom::value,
                    cluster_proof(st.settings.secret, nonce))
          .then([self](ok_atom) { do_register(self); }, refused);
      },
      refused);
}

// Registers, first finding a remote coordinator through the --coordinator node: the
// locate blocks (bounded: this actor is detached), the connect and the proof are
// requests, so the link keeps answering (a node that stops is not held up).
void try_register(link_ptr self) {
  auto& st = self->state;
  if (st.registering)
    return;
  st.registering = true;
  if (st.coordinator) {
    do_register(self);
    return;
  }
  auto contact = locate_coordinator(st.settings.via, st.settings.request_timeout);
  if (!contact.error.empty()) {
    attempt_failed(self, contact.error);
    return;
  }
  auto addr = transports::tcp::parse_address(contact.address);
  self
    ->request(control_middleman(self->system()), st.settings.request_timeout,
              caf::connect_atom::value, addr.host, addr.port)
    .then(
      [self, contact](caf::node_id&, caf::strong_actor_ptr& ptr,
                      std::set<std::string>& ifs) mutable {
        accept_connect(self->system(), contact, std::move(ptr), ifs);
        if (!contact.coordinator) {
          attempt_failed(self, contact.error);
          return;
        }
        auto& st = self->state;
        st.coordinator = contact.coordinator;
        st.address = contact.address;
        self->monitor(st.coordinator);
        prove_then_register(self);
      },
      [self, contact](caf::error& err) {
        attempt_failed(self, fmt::format("the coordinator at {} does not answer: {} ({})",
                                         contact.address, describe(self->system(), err),
                                         tls_hint(self->system())));
      });
}

void heartbeat(link_ptr self) {
  auto& st = self->state;
  if (st.node_id == 0) {
    try_register(self);
    return;
  }
  self
    ->request(st.coordinator, st.settings.request_timeout, heartbeat_atom::value,
              st.node_id)
    .then([](ok_atom) {},
          [self](caf::error& err) {
            if (err.category() == caf::atom("rw")) // the coordinator forgot this node
              lost(self, describe(self->system(), err));
            else
              spdlog::warn("cluster: heartbeat to {} unanswered: {}", self->state.address,
                           describe(self->system(), err));
          });
}

// Whether the current request comes from the coordinator this node registered with
// (logs the refusal if not).
bool from_coordinator(link_ptr self) {
  auto& sender = self->current_sender();
  auto& coordinator = self->state.coordinator;
  if (coordinator && sender && sender->address() == coordinator.address())
    return true;
  spdlog::warn("cluster: refused a request from {}: only the cluster coordinator may "
               "grant, stop or ask about jobs, or ask for a rate probe",
               sender ? to_string(sender->node()) : std::string{"(anonymous)"});
  return false;
}

// Passes a coordinator's request on to the rack coordinator, and the answer back. Only
// the coordinator this node registered with may ask.
template <class Reply, class... Ts>
caf::result<Reply> relay_within(link_ptr self, std::chrono::milliseconds timeout,
                                Ts&&... xs) {
  if (!from_coordinator(self))
    return cluster_error(errc::unauthorized, "only the cluster coordinator may ask this");
  auto rp = self->make_response_promise<Reply>();
  self->request(self->state.rack, timeout, std::forward<Ts>(xs)...)
    .then([rp](Reply& r) mutable { rp.deliver(std::move(r)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

template <class Reply, class... Ts>
caf::result<Reply> relay(link_ptr self, Ts&&... xs) {
  return relay_within<Reply>(self, self->state.settings.request_timeout,
                             std::forward<Ts>(xs)...);
}

// Asks the coordinator on the rack coordinator's behalf, within `timeout`.
template <class Reply, class... Ts>
caf::result<Reply> ask(link_ptr self, std::chrono::milliseconds timeout, Ts&&... xs) {
  auto& st = self->state;
  if (st.node_id == 0 || !st.coordinator)
    return cluster_error(errc::unavailable,
                         "this node is not registered with the cluster "
                         "coordinator right now");
  auto rp = self->make_response_promise<Reply>();
  self->request(st.coordinator, timeout, std::forward<Ts>(xs)...)
    .then([rp](Reply& r) mutable { rp.deliver(std::move(r)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

cluster_link_actor::behavior_type link_behavior(link_ptr self, link_settings settings,
                                                rack_coordinator_actor rack) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.rack = std::move(rack);
  if (st.settings.embedded) {
    st.coordinator = st.settings.embedded;
    st.address = st.settings.embedded_address;
  }
  self->send(st.rack, register_atom::value, caf::actor_cast<cluster_gateway>(self));
  self->set_down_handler([self](caf::down_msg& dm) {
    if (self->state.coordinator && dm.source == self->state.coordinator.address())
      lost(self, "the connection closed");
  });
  try_register(self);
  self->delayed_send(self, st.settings.heartbeat, tick_atom::value);
  return {
    [=](grant_atom, job_grant& g) {
      return relay<ok_atom>(self, grant_atom::value, std::move(g));
    },
    [=](status_atom, uint32_t id) {
      return relay<job_event>(self, status_atom::value, id);
    },
    [=](checkpoint_atom, uint32_t id, uint64_t clock, std::string& dir) {
      return relay_within<checkpoint_part>(
        self, std::chrono::milliseconds(defaults::checkpoint_timeout_ms),
        checkpoint_atom::value, id, clock, std::move(dir));
    },
    [=](inject_atom, uint32_t id, std::string& kill, uint32_t index) {
      return relay<std::string>(self, inject_atom::value, id, std::move(kill), index);
    },
    [=](fence_atom, uint32_t id, job_layout& next) {
      return relay_within<chunk_moves>(
        self,
        std::chrono::milliseconds(defaults::move_settle_timeout_ms)
          + self->state.settings.request_timeout,
        fence_atom::value, id, std::move(next));
    },
    [=](reshape_atom, uint32_t id, job_layout& next, chunk_moves& moves) {
      return relay_within<ok_atom>(
        self, std::chrono::milliseconds(defaults::shard_setup_timeout_ms),
        reshape_atom::value, id, std::move(next), std::move(moves));
    },
    [=](reroute_atom, uint32_t id, job_layout& next) {
      return relay<ok_atom>(self, reroute_atom::value, id, std::move(next));
    },
    [=](thaw_atom, uint32_t id) { return relay<ok_atom>(self, thaw_atom::value, id); },
    [=](hyper_atom, uint32_t id, uint64_t change_id, hyper_change& change) {
      return relay<uint64_t>(self, hyper_atom::value, id, change_id, std::move(change));
    },
    [=](hyper_atom, uint32_t id, uint64_t change_id, bool apply) {
      return relay<ok_atom>(self, hyper_atom::value, id, change_id, apply);
    },
    [=](metrics_atom) { return self->state.node_id != 0; },
    [=](drain_atom) {
      // The node is told to stop (SIGTERM): its jobs move off it first.
      return ask<std::string>(self, std::chrono::milliseconds(defaults::drain_timeout_ms),
                              drain_atom::value, self->state.settings.node.name);
    },
    [=](takeover_atom, uint32_t id, job_layout& next) {
      return relay_within<ok_atom>(
        self, std::chrono::milliseconds(defaults::shard_setup_timeout_ms),
        takeover_atom::value, id, std::move(next));
    },
    [=](halt_atom, uint32_t id, std::string& why) {
      return relay<ok_atom>(self, halt_atom::value, id, std::move(why));
    },
    [=](abort_atom, uint32_t id, std::string& why) {
      return relay<ok_atom>(self, abort_atom::value, id, std::move(why));
    },
    [=](probe_atom, rate_probe_request& req) -> caf::result<rate_probe_result> {
      if (!from_coordinator(self))
        return cluster_error(errc::unauthorized,
                             "only the cluster coordinator may ask this");
      auto rp = self->make_response_promise<rate_probe_result>();
      // The prober bounds the probe by req.timeout_ms; this bounds the prober.
      auto wait = std::chrono::milliseconds(req.timeout_ms)
                  + self->state.settings.request_timeout;
      self
        ->request(spawn_rate_prober(self->system(), self->state.settings.node.name), wait,
                  probe_atom::value, std::move(req))
        .then([rp](rate_probe_result& r) mutable { rp.deliver(std::move(r)); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](event_atom, job_event& ev) {
      auto& st = self->state;
      if (st.node_id == 0) {
        spdlog::warn("cluster: job {} {} but the coordinator is not reachable to hear it",
                     ev.job_id, ev.state);
        return;
      }
      self->send(st.coordinator, event_atom::value, st.node_id, std::move(ev));
    },
    [=](checkpoint_atom, uint32_t job_id, uint64_t clock, checkpoint_part& part) {
      auto& st = self->state;
      if (st.node_id == 0) {
        spdlog::warn("cluster: job {}: checkpoint file {} of clock {} written but the "
                     "coordinator is not reachable to hear it",
                     job_id, part.file, clock);
        return;
      }
      self->send(st.coordinator, checkpoint_atom::value, st.node_id, job_id, clock,
                 std::move(part));
    },
    [=](where_atom, std::string& name) {
      return ask<job_layout>(self, self->state.settings.request_timeout,
                             where_atom::value, std::move(name));
    },
    [=](hyper_atom, std::string& name, hyper_change& change) {
      // Two rounds over the job's nodes, each bounded by the coordinator's own timeout.
      return ask<uint64_t>(self, 3 * self->state.settings.request_timeout,
                           hyper_atom::value, std::move(name), std::move(change));
    },
    [=](bind_atom, rank_binding& b) {
      // Held by the coordinator until every rank is bound: at most the longest join
      // timeout, and the coordinator's own answer time.
      auto bound = std::chrono::milliseconds(defaults::max_join_timeout_ms)
                   + self->state.settings.request_timeout;
      return ask<rank_map>(self, bound, bind_atom::value, std::move(b));
    },
    [=](leave_atom) {
      auto& st = self->state;
      if (st.node_id != 0)
        self->send(st.coordinator, leave_atom::value, st.node_id);
      self->quit();
      return ok_atom::value;
    },
    [=](tick_atom) {
      heartbeat(self);
      self->delayed_send(self, self->state.settings.heartbeat, tick_atom::value);
    },
  };
}

} // namespace

cluster_link_actor spawn_cluster_link(caf::actor_system& sys, link_settings settings,
                                      rack_coordinator_actor rack) {
  return sys.spawn<caf::detached>(link_behavior, std::move(settings), std::move(rack));
}

} // namespace rw::actors
