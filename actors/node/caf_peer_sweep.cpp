#include "actors/node/caf_peer_sweep.hpp"

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

} // namespace rw::actors::detail
