#include "actors/detail/caf_peer_sweep.hpp"

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <spdlog/spdlog.h>

namespace rw::actors::detail {

void forget_departed_peers(caf::actor_system& sys) {
  if (!sys.has_middleman())
    return;
  auto* mm = &sys.middleman(); // lives as long as the system
  mm->backend().post([mm] {
    // On the multiplexer's thread, where the broker runs and CAF itself reaches it.
    auto handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    if (!handle)
      return;
    auto* broker = static_cast<caf::io::basp_broker*>(
      caf::actor_cast<caf::abstract_actor*>(handle));
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
