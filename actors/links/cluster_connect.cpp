#include "actors/links/cluster_connect.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/node/control_tls.hpp"
#include "runtime/credentials.hpp"
#include "services/locator.hpp"

namespace rw::actors {

coordinator_contact locate_coordinator(const std::string& via,
                                       std::chrono::milliseconds timeout) {
  coordinator_contact out;
  try {
    auto located = services::locate(via, timeout);
    out.address = located.coordinator;
    transports::tcp::parse_address(out.address); // a usable HOST:PORT
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

void accept_connect(caf::actor_system& sys, coordinator_contact& out,
                    caf::strong_actor_ptr ptr, const std::set<std::string>& ifs) {
  if (!ptr)
    out.error = fmt::format("nothing is published at {}", out.address);
  else if (!sys.assignable<cluster_coordinator_actor>(ifs))
    out.error = fmt::format("the actor at {} is not a RackWeave cluster coordinator of "
                            "this version",
                            out.address);
  else
    out.coordinator = caf::actor_cast<cluster_coordinator_actor>(std::move(ptr));
}

std::string cluster_proof(const std::string& secret, const std::string& nonce) {
  auto* p = reinterpret_cast<const std::byte*>(nonce.data());
  auto mac = runtime::prove_cluster(secret, runtime::byte_vector(p, p + nonce.size()));
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

namespace {

// Proves the cluster secret to the coordinator for this process. Returns why not.
std::string prove_secret(caf::actor_system& sys,
                         const cluster_coordinator_actor& coordinator,
                         const std::string& secret, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys};
  std::string failure;
  std::string nonce;
  self->request(coordinator, timeout, auth_atom::value)
    .receive([&](std::string& n) { nonce = std::move(n); },
             [&](caf::error& err) { failure = describe(sys, err); });
  if (!failure.empty())
    return failure;
  if (nonce.empty())
    spdlog::warn(
      "cluster: the coordinator asks for no cluster secret: the one given here "
      "protects nothing, and anyone who reaches its control address can "
      "create, stop or delete jobs (give the coordinator the same "
      "--cluster-secret-file)");
  self->request(coordinator, timeout, auth_atom::value, cluster_proof(secret, nonce))
    .receive([](ok_atom) {}, [&](caf::error& err) { failure = describe(sys, err); });
  return failure;
}

} // namespace

coordinator_contact reach_coordinator(caf::actor_system& sys, const std::string& via,
                                      std::chrono::milliseconds timeout,
                                      const std::string& secret) {
  auto out = locate_coordinator(via, timeout);
  if (!out.error.empty())
    return out;
  auto addr = transports::tcp::parse_address(out.address);
  // The middleman's own connect, with a deadline: remote_actor() waits for the
  // handshake without one.
  caf::scoped_actor self{sys};
  self
    ->request(control_middleman(sys), timeout, caf::connect_atom::value, addr.host,
              addr.port)
    .receive(
      [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>& ifs) {
        accept_connect(sys, out, std::move(ptr), ifs);
      },
      [&](caf::error& err) {
        // With derived certificates the node was reached and named the coordinator: a
        // connection the coordinator closes during the handshake is it refusing this
        // secret (a refused or timed-out connect is not).
        if (derived_control_tls(sys) && err == caf::sec::disconnect_during_handshake)
          out.code = errc::unauthorized;
        out.error = err == caf::sec::request_timeout
                      ? fmt::format("no handshake within {} ms", timeout.count())
                      : sys.render(err);
        out.error += " (" + tls_hint(sys) + ")";
      });
  if (!out.coordinator) {
    if (out.code == errc::unauthorized)
      out.error = fmt::format("the coordinator at {} refused the TLS handshake: this "
                              "--cluster-secret-file is not the cluster's: {}",
                              out.address, out.error);
    else
      out.error = fmt::format("the node at {} points to the coordinator at {}, which "
                              "does not answer: {}",
                              via, out.address, out.error);
    return out;
  }
  if (!secret.empty())
    if (auto why = prove_secret(sys, out.coordinator, secret, timeout); !why.empty()) {
      out.coordinator = nullptr;
      out.code = errc::unauthorized;
      out.error = fmt::format(
        "the coordinator at {} did not accept the cluster secret: {}", out.address, why);
    }
  return out;
}

} // namespace rw::actors
