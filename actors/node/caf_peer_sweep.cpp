#include "actors/node/caf_peer_sweep.hpp"

#include <algorithm>
#include <future>
#include <memory>

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <spdlog/spdlog.h>

namespace rw::actors::detail {

namespace {

caf::io::basp_broker* basp_of(caf::io::middleman* mm) {
  auto handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  if (!handle)
    return nullptr;
  return static_cast<caf::io::basp_broker*>(
    caf::actor_cast<caf::abstract_actor*>(handle));
}

} // namespace

void peer_connections(
  caf::actor_system& sys, std::vector<caf::node_id> nodes,
  std::function<void(std::vector<caf::node_id>, std::vector<int64_t>)> then) {
  if (!sys.has_middleman() || nodes.empty())
    return;
  auto* mm = &sys.middleman();
  mm->backend().post([mm, nodes = std::move(nodes), then = std::move(then)]() mutable {
    auto* broker = basp_of(mm);
    std::vector<int64_t> ids;
    for (auto& node : nodes) {
      auto route = broker ? broker->instance.tbl().lookup(node) : caf::none;
      ids.push_back(route ? route->hdl.id() : -1);
    }
    then(std::move(nodes), std::move(ids));
  });
}

std::string peer_address(caf::actor_system& sys, const caf::node_id& node,
                         std::chrono::milliseconds wait) {
  if (!sys.has_middleman() || !node || node == sys.node())
    return {};
  auto* mm = &sys.middleman();
  auto answer = std::make_shared<std::promise<std::string>>();
  auto result = answer->get_future();
  mm->backend().post([mm, node, answer] {
    auto* broker = basp_of(mm);
    std::string where;
    if (broker != nullptr)
      if (auto route = broker->instance.tbl().lookup(node))
        where = broker->remote_addr(route->hdl) + ":"
                + std::to_string(broker->remote_port(route->hdl));
    answer->set_value(std::move(where));
  });
  if (result.wait_for(wait) != std::future_status::ready)
    return {};
  return result.get();
}

void forget_departed_peers(caf::actor_system& sys) {
  if (!sys.has_middleman())
    return;
  auto* mm = &sys.middleman(); // lives as long as the system
  mm->backend().post([mm] {
    // On the multiplexer's thread, where the broker runs and CAF itself reaches it.
    auto* broker = basp_of(mm);
    if (broker == nullptr)
      return;
    size_t forgotten = 0;
    auto& servers = broker->spawn_servers;
    for (auto it = servers.begin(); it != servers.end();) {
      if (!broker->instance.tbl().lookup(it->first)) {
        // Its node is gone: a helper still waiting for that node's answer would wait 5
        // minutes, outside the broker's sight (whose end stops the helpers it holds).
        caf::anon_send_exit(it->second, caf::exit_reason::user_shutdown);
        it = servers.erase(it);
        ++forgotten;
      } else {
        ++it;
      }
    }
    if (forgotten > 0)
      spdlog::debug("control plane: forgot {} departed CAF peer(s), {} connected",
                    forgotten, servers.size());
  });
}

size_t stop_peer_helpers(caf::actor_system& sys, std::chrono::milliseconds wait) {
  if (!sys.has_middleman())
    return 0;
  auto* mm = &sys.middleman();
  auto taken = std::make_shared<std::promise<std::vector<caf::actor>>>();
  auto helpers = taken->get_future();
  mm->backend().post([mm, taken] {
    std::vector<caf::actor> out;
    if (auto* broker = basp_of(mm)) {
      for (auto& [node, helper] : broker->spawn_servers)
        out.push_back(helper);
      broker->spawn_servers.clear();
    }
    taken->set_value(std::move(out));
  });
  auto deadline = std::chrono::steady_clock::now() + wait;
  if (helpers.wait_until(deadline) != std::future_status::ready) {
    spdlog::warn("control plane: the middleman did not hand over its peer helpers within "
                 "{} ms; stopping without them",
                 wait.count());
    return 0;
  }
  auto all = helpers.get();
  if (all.empty())
    return 0;
  caf::scoped_actor self{sys};
  for (auto& helper : all) {
    self->monitor(helper);
    self->send_exit(helper, caf::exit_reason::user_shutdown);
  }
  size_t down = 0;
  bool late = false;
  while (down < all.size() && !late) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    self->receive([&](caf::down_msg&) { ++down; },
                  caf::after(std::max(left, std::chrono::milliseconds(0))) >>
                    [&] { late = true; });
  }
  if (late)
    spdlog::warn("control plane: {} of {} CAF peer helper(s) did not stop within {} ms",
                 all.size() - down, all.size(), wait.count());
  else
    spdlog::debug("control plane: stopped {} CAF peer helper(s)", all.size());
  return down;
}

} // namespace rw::actors::detail
