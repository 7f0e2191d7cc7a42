#include "logic/limited_log.hpp"
#include "logic/log_text.hpp"
#include "actors/node/coordinator_node.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/node/control_tls.hpp"
#include "actors/cluster/store.hpp"
#include "actors/cluster/rack_choice.hpp"
#include "actors/door/tenant_door.hpp"
#include "runtime/credentials.hpp"
#include "runtime/tenants.hpp"
#include "services/locator.hpp"

namespace rw::actors {

namespace {

constexpr auto where_timeout = std::chrono::seconds(2);

// A worker that says hello to the coordinator's own address is sent on to the job's
// node for it (or to all of them, to pick the nearest): actors/cluster/rack_choice.
services::hello_answer hello_answer(caf::actor_system& sys,
                                    cluster_coordinator_actor coordinator,
                                    std::string node, std::string refusal) {
  return [&sys, coordinator, node, refusal](const protocol::hello_msg& hello,
                                            const std::string& peer) {
    protocol::error_msg out{errc::bad_frame, refusal, {}};
    caf::scoped_actor self{sys};
    self->request(coordinator, where_timeout, where_atom::value, hello.spec.name)
      .receive(
        [&](job_layout& l) {
          detail::placement_facts f;
          f.peer_host = detail::host_of(peer);
          f.rack = hello.rack;
          f.picked_by = hello.picked_by;
          std::string why;
          out = detail::send_elsewhere(l, hello.spec.name, hello.rank, f, node, why);
          spdlog::info("worker sent on: peer={} job='{}' rank={}: node {} is the "
                       "coordinator; to {}: {}",
                       peer, detail::loggable(hello.spec.name), hello.rank, node,
                       fmt::join(out.candidates, ", "), detail::loggable(why, 512));
        },
        [&](caf::error& err) {
          out.code = errc::unknown_job;
          out.message = fmt::format("{} ({})", refusal, describe(sys, err));
          detail::log_limited(spdlog::level::warn, peer,
                              "hello refused: peer={} job='{}' rank={}: {}",
                              fmt::format("hello refused: peer={} job='{}' rank={}: {}",
                                          peer, detail::loggable(hello.spec.name),
                                          hello.rank, describe(sys, err)));
        });
    return out;
  };
}

// Opens the state database (--state-db) and reads the registry it holds into `cs`;
// throws, naming the file, when it cannot: a coordinator never starts empty over a
// database it could not read.
void open_state(const runtime::node_config& cfg, cluster_settings& cs) {
  if (cfg.state_db.empty()) {
    spdlog::info("cluster: no --state-db: the job registry is kept in memory only and is "
                 "lost if this coordinator stops (nodes register again, but their jobs "
                 "are failed and forgotten)");
    return;
  }
  std::string error;
  auto store = detail::cluster_store::open(cfg.state_db, error);
  if (!store)
    throw std::runtime_error(error);
  auto registry = std::make_shared<detail::stored_registry>();
  if (!store->load(*registry, error))
    throw std::runtime_error(error);
  spdlog::info("cluster: job registry persisted in {} ({} job(s) stored)", cfg.state_db,
               registry->jobs.size());
  cs.store = std::move(store);
  cs.restored = std::move(registry);
}

} // namespace

coordinator_node::coordinator_node(caf::actor_system& sys,
                                   const runtime::node_config& cfg,
                                   const std::string& listen, bool with_locator)
  : sys_(sys) {
  if (!sys.has_middleman())
    throw std::runtime_error("the actor system has no middleman: call "
                             "rw::actors::register_cluster_types on its config");
  // Default: the host of the first --listen address, any free port.
  auto listen_host = transports::tcp::parse_address(listen).host;
  auto control = transports::tcp::parse_address(cfg.control.empty() ? listen_host + ":0"
                                                                    : cfg.control);
  cluster_settings cs;
  if (!cfg.cluster_secret_file.empty()) {
    cs.secret = runtime::read_secret_file(cfg.cluster_secret_file);
  } else {
    // rw-node refused to start this way on an address other hosts reach, unless
    // --insecure (it warned then, runtime/control_exposure.hpp).
    spdlog::info(
      "cluster: no --cluster-secret-file: any process that reaches the control "
      "address {} can register nodes and create, stop or delete jobs",
      control.to_string());
  }
  if (!cfg.tenants_file.empty()) {
    if (cs.secret.empty())
      throw std::runtime_error("--tenants-file needs --cluster-secret-file: without a "
                               "cluster secret every process is an operator, and tenants "
                               "would separate nothing");
    cs.tenants = runtime::load_tenants(cfg.tenants_file, cs.secret);
    std::vector<std::string> names;
    for (auto& [name, t] : cs.tenants)
      names.push_back(name);
    spdlog::info("cluster: {} tenant(s) from {}: [{}]", names.size(), cfg.tenants_file,
                 fmt::join(names, ", "));
  }
  cs.checkpoint_root = runtime::checkpoint::checkpoint_root{cfg.checkpoint_root};
  cs.max_chunk_bytes = cfg.max_chunk_bytes;
  cs.max_workers = cfg.max_workers;
  cs.node_timeout = std::chrono::milliseconds(cfg.node_timeout_ms);
  open_state(cfg, cs);
  if (!cs.tenants.empty())
    open_door(cfg, control, cs);
  coordinator_ = spawn_cluster_coordinator(sys, cs);
  if (door_)
    caf::anon_send(door_, caf::put_atom::value, coordinator_);
  auto host = transports::tcp::is_wildcard(control.host) ? std::string{} : control.host;
  // With TLS (--tls-*) the port speaks only TLS, and only to certified peers.
  tls_ = control_tls(sys);
  auto* in = host.empty() ? nullptr : host.c_str();
  auto port = tls_ ? caf::openssl::publish(coordinator_, control.port, in, true)
                   : sys.middleman().publish(coordinator_, control.port, in, true);
  if (!port) {
    auto why = port.error() == caf::sec::cannot_open_port
                 ? fmt::format(
                   "cannot open the control port {}: another process listens "
                   "there, or the host is not an address of this machine; give "
                   "another with --control HOST:PORT (port 0: any free one)",
                   control.to_string())
                 : fmt::format("cannot publish the cluster coordinator on {}: {}",
                               control.to_string(), sys.render(port.error()));
    stop();
    throw std::runtime_error(why);
  }
  port_ = *port;
  control.port = *port;
  control_ = control.to_string();
  if (with_locator) {
    try {
      std::string refusal =
        "this is the cluster coordinator's address: workers connect to a rack-agg node "
        "(rw.job_status(name).endpoints says which); shells and nodes only ask it "
        "where the coordinator is";
      locator_ = std::make_unique<services::locator_service>(
        listen, protocol::located_msg{control_, cfg.name, "coordinator", tenant_door_},
        refusal, hello_answer(sys, coordinator_, cfg.name, refusal));
    } catch (const std::exception& e) {
      stop();
      throw;
    }
  }
  spdlog::info("cluster coordinator up: control={}{}{} secret={} tls={}", control_,
               locator_ ? " locate=" + locator_->address() : std::string{},
               door_ ? " tenant-door=" + tenant_door_ : std::string{},
               cs.secret.empty() ? "none" : "required",
               !tls_ ? "off"
               : derived_control_tls(sys_)
                 ? "required (certificates derived from the secret)"
                 : "required");
}

coordinator_node::~coordinator_node() {
  stop();
}

std::string coordinator_node::listen_address() const {
  return locator_ ? locator_->address() : std::string{};
}

void coordinator_node::open_door(const runtime::node_config& cfg,
                                 const transports::tcp::address& control,
                                 cluster_settings& cs) {
  auto at = transports::tcp::parse_address(cfg.tenant_listen.empty() ? control.host + ":0"
                                                                     : cfg.tenant_listen);
  door::door_settings ds;
  ds.host = at.host;
  ds.port = at.port;
  ds.tenants = cs.tenants;
  cs.door_key = runtime::make_token(); // 256 random bits; stays in this process
  ds.key = cs.door_key;
  auto opened = door::open_tenant_door(sys_, std::move(ds));
  door_ = std::move(opened.actor);
  at.port = opened.port;
  tenant_door_ = at.to_string();
  cs.tenant_door = tenant_door_;
}

void coordinator_node::stop() {
  locator_.reset();
  if (door_) {
    caf::anon_send_exit(door_, caf::exit_reason::user_shutdown);
    door_ = nullptr;
  }
  if (!coordinator_)
    return;
  // (CAF 0.17.6's openssl::unpublish does not compile: the module's middleman actor
  // takes the same unpublish message as the plain one.)
  caf::scoped_actor self{sys_};
  if (port_ != 0)
    self
      ->request(control_middleman(sys_), std::chrono::seconds(5),
                caf::unpublish_atom::value,
                caf::actor_cast<caf::actor_addr>(coordinator_), port_)
      .receive([] {}, [](const caf::error&) {});
  self->send_exit(coordinator_, caf::exit_reason::user_shutdown);
  self->wait_for(coordinator_);
  coordinator_ = nullptr;
}

} // namespace rw::actors
