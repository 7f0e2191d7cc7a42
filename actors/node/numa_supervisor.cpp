#include "actors/node/numa_supervisor.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rw::actors {

namespace {

struct supervisor_state {
  supervisor_settings settings;
  std::vector<chunk_shard_actor> shards; // by position in settings.shards
  std::vector<std::shared_ptr<detail::shard_book>> books; // each shard's state, kept
  std::vector<uint32_t> restarts;                         // by position, for the logs
  std::vector<nic_poller_actor> pollers; // by position in settings.endpoints
  std::vector<std::shared_ptr<detail::poller_book>> poller_books; // each poller's, kept
  rack_coordinator_actor coordinator;
  std::vector<nic_poller_actor> all_pollers;
  bool stopping = false;
  size_t children_up = 0;
  caf::response_promise stopped;
  static inline const char* name = "rw.numa_supervisor";
};

using sup_ptr = numa_supervisor_actor::stateful_pointer<supervisor_state>;

void respawn_shard(sup_ptr self, size_t pos, const caf::error& reason) {
  auto& st = self->state;
  auto& settings = st.settings.shards[pos];
  ++st.restarts[pos];
  spdlog::error("shard {} on cpu {} (numa {}) failed: {}; restarting it with its chunks' "
                "state (restart {})",
                settings.index, settings.core.os_cpu, settings.numa,
                self->system().render(reason), st.restarts[pos]);
  auto shard = spawn_chunk_shard(self->system(), settings, st.books[pos]);
  self->monitor(shard);
  st.shards[pos] = shard;
  if (st.coordinator)
    self->send(st.coordinator, replace_atom::value, settings.index, shard);
  for (auto& p : st.all_pollers)
    self->send(p, replace_atom::value, settings.index, shard);
}

void on_down(sup_ptr self, const caf::down_msg& down) {
  auto& st = self->state;
  for (size_t i = 0; i < st.shards.size(); ++i) {
    if (st.shards[i].address() != down.source)
      continue;
    if (st.stopping) {
      --st.children_up;
    } else {
      respawn_shard(self, i, down.reason);
      return;
    }
  }
  for (size_t i = 0; i < st.pollers.size(); ++i) {
    if (st.pollers[i].address() != down.source)
      continue;
    if (st.stopping) {
      --st.children_up;
      continue;
    }
    auto& e = st.settings.endpoints[i];
    spdlog::error("poller of {} (numa domain {}) failed: {}; restarting it with its "
                  "connections",
                  e.ep->describe(), st.settings.numa, self->system().render(down.reason));
    auto old = st.pollers[i];
    st.pollers[i] = spawn_nic_poller(self->system(), e.settings, e.ep, st.coordinator, {},
                                     st.poller_books[i]);
    self->monitor(st.pollers[i]);
    for (auto& p : st.all_pollers)
      if (p == old)
        p = st.pollers[i];
    std::vector<caf::actor> handles; // the coordinator tells them when a job moves
    for (auto& p : st.all_pollers)
      handles.push_back(caf::actor_cast<caf::actor>(p));
    self->send(st.coordinator, pollers_atom::value, std::move(handles));
  }
  if (st.stopping && st.children_up == 0) {
    st.stopped.deliver(ok_atom::value);
    self->quit();
  }
}

numa_supervisor_actor::behavior_type supervisor_behavior(sup_ptr self,
                                                         supervisor_settings settings) {
  auto& st = self->state;
  st.settings = std::move(settings);
  for (auto& s : st.settings.shards) {
    st.books.push_back(make_shard_book());
    st.restarts.push_back(0);
    st.shards.push_back(spawn_chunk_shard(self->system(), s, st.books.back()));
    self->monitor(st.shards.back());
  }
  self->set_down_handler([=](caf::down_msg& down) { on_down(self, down); });
  return {
    [=](get_atom) { return self->state.shards; },
    [=](start_atom, rack_coordinator_actor& coordinator,
        std::vector<chunk_shard_actor>& all_shards) {
      auto& st = self->state;
      st.coordinator = coordinator;
      for (auto& e : st.settings.endpoints) {
        st.poller_books.push_back(make_poller_book());
        st.pollers.push_back(spawn_nic_poller(self->system(), e.settings, e.ep,
                                              coordinator, all_shards,
                                              st.poller_books.back()));
        self->monitor(st.pollers.back());
      }
      return st.pollers;
    },
    [=](peers_atom, rack_coordinator_actor& coordinator,
        std::vector<nic_poller_actor>& pollers) {
      self->state.coordinator = std::move(coordinator);
      self->state.all_pollers = std::move(pollers);
    },
    [=](stop_atom) -> caf::result<ok_atom> {
      auto& st = self->state;
      st.stopping = true;
      st.stopped = self->make_response_promise();
      st.children_up = st.shards.size() + st.pollers.size();
      if (st.children_up == 0) {
        self->quit();
        return ok_atom::value;
      }
      for (auto& p : st.pollers)
        self->send(p, stop_atom::value);
      for (auto& s : st.shards)
        self->send_exit(s, caf::exit_reason::user_shutdown);
      return st.stopped;
    },
  };
}

} // namespace

numa_supervisor_actor spawn_numa_supervisor(caf::actor_system& sys,
                                            supervisor_settings settings) {
  return sys.spawn(supervisor_behavior, std::move(settings));
}

} // namespace rw::actors
