#include "actors/cluster_connect.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/format.h>

#include "transports/tcp/locator.hpp"

namespace rw::actors {

coordinator_contact reach_coordinator(caf::actor_system& sys, const std::string& via,
                                      std::chrono::milliseconds timeout) {
  coordinator_contact out;
  transports::tcp::address addr;
  try {
    out.address = transports::tcp::locate(via, timeout).coordinator;
    addr = transports::tcp::parse_address(out.address);
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  // The middleman's own connect, with a deadline: remote_actor() waits for the
  // handshake without one.
  caf::scoped_actor self{sys};
  self->request(sys.middleman().actor_handle(), timeout, caf::connect_atom::value, addr.host,
                addr.port)
    .receive(
      [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>& ifs) {
        if (!ptr)
          out.error = fmt::format("nothing is published at {}", out.address);
        else if (!sys.assignable<cluster_coordinator_actor>(ifs))
          out.error = fmt::format("the actor at {} is not a RackWeave cluster coordinator "
                                  "of this version",
                                  out.address);
        else
          out.coordinator = caf::actor_cast<cluster_coordinator_actor>(std::move(ptr));
      },
      [&](caf::error& err) {
        out.error = err == caf::sec::request_timeout
                      ? fmt::format("no handshake within {} ms", timeout.count())
                      : sys.render(err);
      });
  if (!out.coordinator)
    out.error = fmt::format("the node at {} points to the coordinator at {}, which does not "
                            "answer: {}",
                            via, out.address, out.error);
  return out;
}

} // namespace rw::actors
