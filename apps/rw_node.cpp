// rw-node: a long-running RackWeave node. `rw-node --help` lists every option; each
// also has a key in the TOML file given with --config (see config/rack-agg.toml).

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/tools/crash_report.hpp"
#include "apps/tools/exit_codes.hpp"
#include "apps/tools/logging.hpp"
#include "apps/tools/metrics_server.hpp"
#include "apps/tools/metrics_snapshot.hpp"
#include "actors/cluster_messages.hpp"
#include "actors/node/caf_peer_sweep.hpp"
#include "actors/node/control_tls.hpp"
#include "actors/node/coordinator_node.hpp"
#include "actors/node/idle_policy.hpp"
#include "actors/node/node_metrics.hpp"
#include "actors/node/rack_agg_node.hpp"
#include "runtime/checkpoint/root.hpp"
#include "runtime/control_exposure.hpp"
#include "runtime/credentials.hpp"
#include "runtime/tenants.hpp"
#include "runtime/node_config.hpp"
#include "runtime/placement.hpp"
#include "runtime/topology.hpp"
#include "runtime/trace.hpp"

namespace {

const char* description =
  "rw-node: a RackWeave node.\n\n"
  "  --role rack-agg     the rack's aggregation node: workers connect to --listen, push\n"
  "                      gradients and get updated parameters back (summed in rank\n"
  "                      order, optimizer run on the node). Without --coordinator it\n"
  "                      embeds the cluster coordinator, so one node is a cluster.\n"
  "  --role coordinator  only the cluster coordinator: membership, the job registry\n"
  "                      and job tokens. Rack-agg nodes join with --coordinator set\n"
  "                      to its --listen address. With --state-db FILE its job\n"
  "                      registry survives a restart (SQLite; docs/operations.md).\n\n"
  "Jobs are created with rw-shell (rw.job_create{...}), which returns the job's token;\n"
  "workers prove they hold it. Any node's --listen address leads rw-shell and other\n"
  "nodes to the coordinator.\n\n"
  "A job with reduction = auto over several racks is planned from the link rates:\n"
  "--uplink-gbps and --core-gbps where given. Where a node has no --core-gbps, the\n"
  "coordinator has the job's rack-aggs probe each other when the job is created: each\n"
  "sends the next one a short TCP burst (8 MiB or 50 ms at most, bounded by 1.5 s in\n"
  "all) on its --listen endpoint and the measured rate stands for the core link,\n"
  "reused for 60 s. Only agg-to-agg paths are measured; the worker links are not (they\n"
  "are --uplink-gbps, else the NIC's reported speed, else as fast as the core link).\n"
  "A probe that fails falls back to equal links; the plan says where every number\n"
  "came from (rw.job_status(name).plan, and the coordinator's log).\n\n"
  "Stops on SIGINT at once (its jobs' workers see it go; jobs with replicas go on\n"
  "without it). On SIGTERM a rack-agg in a cluster drains itself first, as\n"
  "rw.node_drain does: it takes no new jobs, and every flat BSP job on it and other\n"
  "nodes moves its chunks, with their state, to the other nodes while it trains\n"
  "(up to 120 s; a second SIGTERM or SIGINT stops at once). A node that registers\n"
  "takes new jobs; rw.node_join(name) in rw-shell also moves a share of the running\n"
  "flat BSP jobs onto it.\n\n"
  "Logs go to stderr, and with --log-file also to a file rotated by size; --log-format\n"
  "json writes one JSON object per line. Every --stats-interval-s seconds (60; 0: off)\n"
  "one info line gives the node's throughput. --metrics HOST:PORT serves Prometheus\n"
  "metrics (/metrics), liveness (/healthz) and readiness (/readyz) over HTTP; /metrics\n"
  "names every job on the node (tenants' too): bind it to a private address, and\n"
  "give --metrics-token-file to ask scrapers for a bearer token.\n\n"
  "The control plane: with --cluster-secret-file it is mutual TLS with certificates\n"
  "derived from the secret (or from --tls-* files), so a process without the secret\n"
  "is refused before any CAF message; without either, every process that reaches the\n"
  "coordinator's control port is an operator, so rw-node refuses to start (exit 2)\n"
  "unless the control port and every --listen address are loopback or --insecure is\n"
  "given (docs/security.md). Checkpoints and restores take paths under\n"
  "--checkpoint-root only (none without it).\n\n"
  "Exit codes: 0 stopped by a signal, 1 it failed (could not start, a port is busy),\n"
  "2 a usage or configuration error.";

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// What /metrics, /healthz and /readyz see of the node as it starts, serves and stops.
// The node's objects outlive the metrics server (stopped first), so a scrape may use
// them without a lock.
struct node_view {
  std::atomic<const rw::actors::rack_agg_node*> node{nullptr};
  std::atomic<const rw::actors::coordinator_node*> cluster{nullptr};
  std::atomic<bool> started{false};
  std::atomic<bool> stopping{false};
};

// The periodic throughput line (--stats-interval-s), on a thread of its own.
class throughput_logger {
public:
  throughput_logger(caf::actor_system& sys, const rw::actors::rack_agg_node& node,
                    uint32_t interval_s)
    : thread_([this, &sys, &node, interval_s] { run(sys, node, interval_s); }) {}
  ~throughput_logger() {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

private:
  void run(caf::actor_system& sys, const rw::actors::rack_agg_node& node,
           uint32_t interval_s) {
    auto before = rw::actors::read_totals(sys, node);
    auto since = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock{mutex_};
    while (
      !wake_.wait_for(lock, std::chrono::seconds(interval_s), [this] { return done_; })) {
      lock.unlock();
      auto now = rw::actors::read_totals(sys, node);
      auto at = std::chrono::steady_clock::now();
      spdlog::info("{}",
                   rw::actors::throughput_line(
                     before, now, std::chrono::duration<double>(at - since).count()));
      before = now;
      since = at;
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

} // namespace

int main(int argc, char** argv) {
  rw::tools::install_crash_report("rw-node"); // a fault leaves a backtrace on stderr
  // Signals are taken by sigwait below, never by another thread: blocked before any
  // thread starts (the log's flusher, the actor system's, the metrics server's), which
  // inherit the mask. A thread that did not block them would die of SIGTERM with the
  // whole process, skipping the drain.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  rw::runtime::node_config cfg;
  // The step timeline (--trace): written until main returns, after the node stopped.
  std::unique_ptr<rw::runtime::trace::session> trace;
  std::string config_file;
  std::string port_file;
  CLI::App app{description, "rw-node"};
  app.set_version_flag("--version", std::string("rw-node ") + RW_VERSION);
  rw::runtime::add_node_options(app, cfg, config_file);
  app.add_option("--port-file", port_file,
                 "once listening, write the bound HOST:PORT to this file (for scripts "
                 "that start the node on port 0)");
  if (auto code = rw::tools::parse_command_line(app, argc, argv))
    return *code;

  spdlog::set_default_logger(spdlog::stderr_color_mt("rw-node"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  try {
    if (!config_file.empty())
      rw::runtime::load_node_config(config_file, app, cfg);
    rw::runtime::check_node_config(cfg);
    rw::tools::setup_node_logging(
      {cfg.log_file, cfg.log_format, cfg.log_max_mib, cfg.log_files, cfg.log_level},
      cfg.name.empty() ? host_name() : cfg.name);
    // An open control plane only on loopback, or when the operator says so.
    if (auto why = rw::runtime::exposure_refusal(cfg); !why.empty())
      throw std::runtime_error(why);
    (void)rw::runtime::checkpoint::checkpoint_root{
      cfg.checkpoint_root}; // an existing directory
    if (!cfg.trace.empty()) {
      trace = std::make_unique<rw::runtime::trace::session>(cfg.trace,
                                                            "rw-node " + cfg.role);
      spdlog::info("trace: writing the step timeline to {} (Chrome trace-event JSON)",
                   cfg.trace);
    }
  } catch (const std::exception& e) {
    spdlog::error("bad configuration: {}", e.what());
    return 2;
  }
  // Before any secret is read or segment made: otherwise every process of this user may
  // ptrace the node, read its memory and open its memfds (a job's parameters) by their
  // /proc names; only root (CAP_SYS_PTRACE) can now. Colocated workers get the shared
  // memory as descriptors (transports/shm/handover.hpp).
  if (!cfg.debuggable && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    spdlog::warn("cannot make the node non-dumpable ({}): processes of its user can "
                 "read its memory and shared memory",
                 std::strerror(errno));
  if (auto open = rw::runtime::exposure_warning(cfg); !open.empty())
    spdlog::warn("{}", open);
  if (cfg.checkpoint_root.empty())
    spdlog::info(
      "no --checkpoint-root: checkpoints and restores are refused on this node");

  caf::actor_system_config sys_cfg;
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  rw::actors::configure_idle_policy(sys_cfg);
  rw::actors::register_cluster_types(sys_cfg);
  try {
    rw::actors::control_identity control;
    control.files = {cfg.tls_cert, cfg.tls_key, cfg.tls_ca};
    if (!cfg.cluster_secret_file.empty()) {
      control.cluster_secret = rw::runtime::read_secret_file(cfg.cluster_secret_file);
      // The node that runs the coordinator reads its tenants now: a bad file is a bad
      // configuration, said before anything starts.
      bool coordinator = cfg.role == "coordinator" || cfg.coordinator.empty();
      if (coordinator && !cfg.tenants_file.empty())
        rw::runtime::load_tenants(cfg.tenants_file, control.cluster_secret);
    }
    rw::actors::configure_control_tls(sys_cfg, control);
  } catch (const std::exception& e) {
    spdlog::error("bad configuration: {}", e.what());
    return 2;
  }
  caf::actor_system sys{sys_cfg};
  std::unique_ptr<rw::actors::rack_agg_node> node;
  std::unique_ptr<rw::actors::coordinator_node> coordinator;
  std::string address;
  // The metrics endpoint comes up first, so /readyz says "starting" while the node does.
  // Its snapshot thread asks the node's actors once a second; the endpoint's thread only
  // copies what it found (both stop before the node's objects go).
  node_view view;
  std::unique_ptr<rw::tools::metrics_snapshot> snapshot;
  std::unique_ptr<rw::tools::metrics_server> metrics;
  if (!cfg.metrics.empty()) {
    auto node_name = cfg.name.empty() ? host_name() : cfg.name;
    rw::tools::metrics_snapshot::sources from_node;
    from_node.metrics = [&sys, &view, node_name, role = cfg.role] {
      return rw::actors::render_metrics(sys, node_name, role, view.node, view.cluster);
    };
    from_node.not_ready = [&sys, &view]() -> std::string {
      if (!view.started)
        return "starting";
      return rw::actors::not_ready(sys, view.node, view.cluster);
    };
    try {
      rw::tools::metrics_options options;
      if (!cfg.metrics_token_file.empty())
        options.token = rw::runtime::read_secret_file(cfg.metrics_token_file,
                                                      "metrics token");
      snapshot = std::make_unique<rw::tools::metrics_snapshot>(std::move(from_node));
      rw::tools::metrics_server::handlers h;
      h.metrics = [s = snapshot.get()] { return s->exposition(); };
      h.not_ready = [s = snapshot.get()] { return s->not_ready(); };
      h.stopping = [&view] { return view.stopping.load(); };
      metrics = std::make_unique<rw::tools::metrics_server>(cfg.metrics, std::move(h),
                                                            std::move(options));
    } catch (const std::exception& e) {
      spdlog::error("node failed to start: {}", e.what());
      return 1;
    }
    spdlog::info(
      "metrics on http://{}/metrics (health: /healthz, /readyz){}", metrics->address(),
      cfg.metrics_token_file.empty() ? "" : "; /metrics asks for its bearer token");
  }
  try {
    if (cfg.role == "coordinator") {
      auto topo = rw::runtime::topology::discover();
      auto listen = rw::runtime::resolve_endpoint(*topo, cfg.listen.front()).listen;
      coordinator = std::make_unique<rw::actors::coordinator_node>(sys, cfg, listen,
                                                                   true);
      address = coordinator->listen_address();
    } else {
      node = std::make_unique<rw::actors::rack_agg_node>(sys, cfg);
      address = node->address();
    }
  } catch (const std::exception& e) {
    spdlog::error("node failed to start: {}", e.what());
    return 1;
  }
  view.node = node.get();
  view.cluster = node ? node->cluster() : coordinator.get();
  view.started = true;
  std::unique_ptr<throughput_logger> throughput;
  if (node && cfg.stats_interval_s > 0)
    throughput = std::make_unique<throughput_logger>(sys, *node, cfg.stats_interval_s);
  if (!port_file.empty()) {
    std::ofstream out{port_file + ".tmp"};
    out << address << "\n";
    out.close();
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("node stopping: {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
  view.stopping = true;
  throughput.reset();
  if (sig == SIGTERM && node) {
    // Its jobs move off it first; another signal meanwhile stops it at once.
    spdlog::info("node draining: its jobs move to the other nodes before it stops");
    auto drained = std::async(std::launch::async, [&] { return node->drain(); });
    bool again = false;
    while (!again
           && drained.wait_for(std::chrono::milliseconds(0))
                != std::future_status::ready) {
      timespec tick{0, 100'000'000};
      again = sigtimedwait(&signals, nullptr, &tick) > 0;
    }
    if (again) {
      spdlog::warn("node stopping at once: a second signal came during the drain");
      node->stop(); // its cluster link goes: the drain's request fails at once
      drained.wait();
    } else {
      spdlog::info("{}", drained.get());
    }
  }
  if (node)
    node->stop();
  if (coordinator)
    coordinator->stop();
  // CAF's helpers for the remote processes it met go before the actor system does
  // (actors/node/caf_peer_sweep.hpp): one left running crashed the node at its exit.
  rw::actors::detail::stop_peer_helpers(sys);
  if (metrics)
    metrics->stop();
  if (snapshot)
    snapshot->stop(); // before the node's objects go: a refresh may be using them
  spdlog::info("node stopped");
  return 0;
}
