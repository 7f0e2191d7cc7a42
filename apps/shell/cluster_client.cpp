#include "apps/shell/cluster_client.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/format.h>

#include "actors/links/cluster_connect.hpp"
#include "actors/node/caf_peer_sweep.hpp"

namespace rw::shell {

struct cluster_client::impl {
  caf::actor_system& sys;
  std::string connect;
  std::chrono::milliseconds timeout;
  std::string secret;
  std::string address; // the coordinator's control address, once found
  actors::cluster_coordinator_actor coordinator;

  impl(caf::actor_system& s, std::string c, std::chrono::milliseconds t, std::string k)
    : sys(s), connect(std::move(c)), timeout(t), secret(std::move(k)) {}

  // Finds the coordinator through the node at `connect` and connects to it.
  void reach() {
    auto contact = actors::reach_coordinator(sys, connect, timeout, secret);
    if (!contact.coordinator)
      throw shell_error(contact.error, contact.code);
    coordinator = std::move(contact.coordinator);
    address = std::move(contact.address);
  }

  // One request; a lost coordinator is found again first. Throws shell_error.
  template <class Result, class... Ts>
  Result ask(const char* what, Ts&&... xs) {
    return ask_within<Result>(timeout, what, std::forward<Ts>(xs)...);
  }

  template <class Result, class... Ts>
  Result ask_within(std::chrono::milliseconds timeout, const char* what, Ts&&... xs) {
    if (!coordinator)
      reach();
    caf::scoped_actor self{sys};
    std::optional<Result> result;
    std::string failure;
    errc code = errc::internal;
    bool timed_out = false;
    bool lost = false;
    self->request(coordinator, timeout, std::forward<Ts>(xs)...)
      .receive([&](Result& r) { result = std::move(r); },
               [&](caf::error& err) {
                 timed_out = err == caf::sec::request_timeout;
                 lost = err.category() != caf::atom("rw"); // not the coordinator's answer
                 if (!lost)
                   code = static_cast<errc>(err.code());
                 failure = actors::describe(sys, err);
               });
    if (result)
      return std::move(*result);
    if (lost) {
      coordinator = nullptr; // find it again next time
      if (timed_out)
        throw shell_error(
          fmt::format("{}: the coordinator at {} did not answer within {} ms", what,
                      address, timeout.count()),
          errc::timeout);
      throw shell_error(
        fmt::format("{}: the connection to the coordinator at {} failed: {}", what,
                    address, failure));
    }
    throw shell_error(fmt::format("{}: {}", what, failure), code);
  }
};

cluster_client::cluster_client(caf::actor_system& sys, std::string connect,
                               std::chrono::milliseconds timeout, std::string secret)
  : impl_(std::make_unique<impl>(sys, std::move(connect), timeout, std::move(secret))) {
  impl_->reach();
}

cluster_client::~cluster_client() {
  // Before the caller destroys the actor system: CAF's helper for the coordinator's
  // node would otherwise outlive the scheduler (actors/node/caf_peer_sweep.hpp).
  actors::detail::stop_peer_helpers(impl_->sys);
}

std::vector<actors::node_info> cluster_client::nodes() {
  return impl_->ask<std::vector<actors::node_info>>("nodes", caf::get_atom::value,
                                                    actors::nodes_atom::value);
}

std::vector<actors::job_report> cluster_client::jobs() {
  return impl_->ask<std::vector<actors::job_report>>("jobs", caf::get_atom::value,
                                                     actors::jobs_atom::value);
}

actors::job_created cluster_client::job_create(const job_spec& spec,
                                               const actors::job_placement& placement) {
  return impl_->ask<actors::job_created>("job_create", actors::create_atom::value, spec,
                                         placement);
}

actors::job_report cluster_client::job_status(const std::string& name) {
  return impl_->ask<actors::job_report>("job_status", actors::status_atom::value, name);
}

actors::job_report cluster_client::job_stop(const std::string& name) {
  return impl_->ask<actors::job_report>("job_stop", actors::stop_atom::value, name);
}

uint64_t cluster_client::job_set(const std::string& name, const hyper_change& change) {
  return impl_->ask<uint64_t>("job_set", actors::hyper_atom::value, name, change);
}

void cluster_client::job_delete(const std::string& name) {
  impl_->ask<actors::ok_atom>("job_delete", actors::remove_atom::value, name);
}

actors::checkpoint_info cluster_client::checkpoint(const std::string& name,
                                                   const std::string& dir,
                                                   uint64_t clock) {
  // A checkpoint waits for its clock and for every node's file.
  auto wait = std::max(impl_->timeout,
                       std::chrono::milliseconds(defaults::checkpoint_timeout_ms)
                         + impl_->timeout);
  return impl_->ask_within<actors::checkpoint_info>(
    wait, "checkpoint", actors::checkpoint_atom::value, name, dir, clock);
}

std::chrono::milliseconds cluster_client::moves_wait() {
  // A drain or join moves the jobs one after another, each within the coordinator's
  // bound: the answer may take that long per job that has not ended (what moves is
  // decided there), beyond the shell's own timeout.
  size_t live = 0;
  for (auto& j : jobs())
    live += actors::is_ended(j.state) ? 0 : 1;
  return impl_->timeout + std::chrono::milliseconds(defaults::move_timeout_ms) * live;
}

std::string cluster_client::node_drain(const std::string& name) {
  return impl_->ask_within<std::string>(moves_wait(), "node_drain",
                                        actors::drain_atom::value, name);
}

std::string cluster_client::node_join(const std::string& name) {
  return impl_->ask_within<std::string>(moves_wait(), "node_join",
                                        actors::node_join_atom::value, name);
}

std::string cluster_client::inject(const std::string& name, const std::string& kill,
                                   const std::string& node, uint32_t index) {
  return impl_->ask<std::string>("inject", actors::inject_atom::value, name, kill, node,
                                 index);
}

std::string cluster_client::coordinator() const {
  return impl_->address;
}

} // namespace rw::shell
