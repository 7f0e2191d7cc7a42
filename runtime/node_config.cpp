#include "runtime/node_config.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <toml++/toml.h>

namespace rw::runtime {

namespace {

struct option_def {
  std::string key;      // "section.name" in the TOML file
  std::string flag;     // "--name"
  std::string negation; // a bool's "--no-name" (empty for other options)
  std::string help;
  std::function<void(CLI::App&)> add;
  std::function<void(const toml::node&)> set; // throws on a wrong type
};

// Reads one TOML value into T; throws naming the key when the type is wrong.
template <class T>
T read_value(const toml::node& n, const std::string& key) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (auto v = n.value<std::string>())
      return *v;
    throw std::runtime_error(fmt::format("key '{}' must be a string", key));
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto v = n.value<double>(); v && *v >= 0)
      return *v;
    throw std::runtime_error(fmt::format("key '{}' must be a number, 0 or more", key));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n.value<bool>())
      return *v;
    throw std::runtime_error(fmt::format("key '{}' must be true or false", key));
  } else {
    // Integers only: toml++'s value<int64_t>() casts a float without a range check
    // (undefined behaviour for 4.2e24, found by fuzz_node_config).
    auto* i = n.as_integer();
    std::optional<int64_t> v;
    if (i != nullptr)
      v = i->get();
    if (!v || *v < 0 || *v > int64_t{UINT32_MAX})
      throw std::runtime_error(
        fmt::format("key '{}' must be a whole number from 0 to {}", key, UINT32_MAX));
    return static_cast<T>(*v);
  }
}

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class T>
option_def def(std::string key, std::string flag, std::string help, T& field) {
  option_def d;
  d.key = key;
  d.flag = flag;
  d.help = help + "  [config: " + key + "]";
  if constexpr (std::is_same_v<T, bool>) {
    d.negation = "--no-" + flag.substr(2);
    d.help = help + (field ? " (default: on)" : " (default: off)") + "  [config: " + key
             + "]";
  }
  d.add = [flag, negation = d.negation, text = d.help, &field](CLI::App& app) {
    if constexpr (std::is_same_v<T, bool>) {
      // Two flags, so that help shows the true default beside --name (a combined
      // "--name,!--no-name" shows "--no-name{false}", which reads as the default).
      app.add_flag(flag, field, text);
      app.add_flag_callback(
        negation, [&field] { field = false; },
        "turns " + flag + " off (even if " + flag + " is given too)");
    } else if constexpr (is_vector<T>::value)
      app.add_option(flag, field, text + " (repeat for several)")->capture_default_str();
    else
      app.add_option(flag, field, text)->capture_default_str();
  };
  d.set = [key, &field](const toml::node& n) {
    if constexpr (is_vector<T>::value) {
      using E = typename T::value_type;
      T values;
      if (auto* arr = n.as_array()) {
        for (auto& item : *arr)
          values.push_back(read_value<E>(item, key));
      } else {
        values.push_back(read_value<E>(n, key)); // a single value is a list of one
      }
      field = std::move(values);
    } else {
      field = read_value<T>(n, key);
    }
  };
  return d;
}

// A text option the TOML file may also give as a number (pollers = 4 or "auto").
option_def number_or_text(std::string key, std::string flag, std::string help,
                          std::string& field) {
  auto d = def(key, flag, std::move(help), field);
  d.set = [key, &field](const toml::node& n) {
    if (auto* i = n.as_integer())
      field = std::to_string(i->get());
    else
      field = read_value<std::string>(n, key);
  };
  return d;
}

std::vector<option_def> option_table(node_config& c) {
  return {
    def("node.role", "--role",
        "what this node does: rack-agg (aggregation for a rack's workers; the first "
        "one embeds the cluster coordinator unless --coordinator is given) or "
        "coordinator (only the cluster coordinator: membership, jobs, tokens)",
        c.role),
    def("node.name", "--name", "node name in logs and replies (default: host name)",
        c.name),
    def("node.rack", "--rack",
        "the rack this node aggregates for: jobs placed by rack use it, workers are "
        "steered to their rack's node, and a job's racks are summed in rack order "
        "(default: the host name)",
        c.rack),
    def("topology.uplink_gbps", "--uplink-gbps",
        "rate (Gbit/s) of the links between this node and its rack's workers, which "
        "reduction = auto plans from; 0 = not configured: the speed the NIC of the first "
        "--listen address reports (/sys/class/net/DEV/speed), else as fast as the probed "
        "core link (worker links are never probed)",
        c.uplink_gbps),
    def("topology.core_gbps", "--core-gbps",
        "rate (Gbit/s) of this node's link into the core network between racks, which "
        "reduction = auto plans from; 0 = not configured: when an auto job over several "
        "racks is created, the coordinator has this node probe the next rack-agg of the "
        "job (up to 8 MiB or 50 ms of TCP to its --listen endpoint; the agg-to-agg path "
        "only, reused for 60 s) and plans with the measured rate; a probe that fails "
        "falls back to equal links and the job's plan says so",
        c.core_gbps),
    def("node.listen", "--listen",
        "HOST:PORT workers connect to, with --pollers NIC pollers each; HOST may be a "
        "network device (eth0:7700); port 0 picks a free one",
        c.listen),
    number_or_text(
      "node.pollers", "--pollers",
      "NIC pollers (threads reading the sockets) per --listen address: N or auto. "
      "An address with N pollers is N endpoints on consecutive ports (PORT, PORT+1, "
      "...; port 0: a free one each); workers connect to every one and spread their "
      "chunks over them. auto: one poller per 4 cores of the machine, 2 to 8 in all "
      "shared among the addresses, each on a core of its NIC's NUMA domain kept from "
      "the shards; 1 on a machine of fewer than 8 cores. The choice and why are logged "
      "at start",
      c.pollers),
    def("node.log_level", "--log-level", "trace, debug, info, warn, error or off",
        c.log_level),
    def("node.log_file", "--log-file",
        "also write the log to FILE, rotated at --log-max-mib into FILE.1 ... FILE.N "
        "(--log-files; the oldest is deleted); stderr keeps its copy",
        c.log_file),
    def("node.log_format", "--log-format",
        "text (one line per event) or json (one JSON object per line: time, level, "
        "node, msg), for stderr and --log-file alike",
        c.log_format),
    def("node.trace", "--trace",
        "write a step timeline to FILE while the node runs: Chrome trace-event JSON "
        "(open it in ui.perfetto.dev or chrome://tracing) with every poller round, each "
        "chunk push received, accepted (summed in rank order as far as it can be) and "
        "stepped (the rest of the sum and the optimizer), and each update answered, on "
        "the thread that did it. Off by default; on, it costs a few percent of a step "
        "(bench/trace.sh) and about 150 bytes per event: a 64 MiB step of 4 workers "
        "writes about 0.5 MiB. docs/operations.md, \"Tracing\"",
        c.trace),
    def("node.log_max_mib", "--log-max-mib", "size (MiB) at which --log-file rotates",
        c.log_max_mib),
    def("node.log_files", "--log-files", "rotated log files kept beside --log-file",
        c.log_files),
    def("node.stats_interval_s", "--stats-interval-s",
        "every this many seconds, one info line with the node's throughput since the "
        "last (bytes in and out, chunk steps, connections, jobs, RSS); 0: none",
        c.stats_interval_s),
    def("node.metrics", "--metrics",
        "HOST:PORT to serve Prometheus metrics on (GET /metrics), with /healthz (the "
        "process is alive) and /readyz (it serves: registered with the coordinator, "
        "pollers up); port 0 picks a free one (logged); empty: none",
        c.metrics),
    def("node.metrics_token_file", "--metrics-token-file",
        "file holding a bearer token for --metrics (first line, 16+ characters, chmod "
        "600, as --cluster-secret-file): /metrics then answers only requests with "
        "'Authorization: Bearer <token>' (others: 401); /healthz and /readyz stay open. "
        "Empty: /metrics is open to whoever reaches the port",
        c.metrics_token_file),
    def("node.pin", "--pin",
        "pin shards and pollers to cores (--no-pin: let the OS move them)", c.pin),
    def("node.shm", "--shm",
        "let workers on this host exchange data through shared memory (--no-shm: TCP "
        "only)",
        c.shm),
    def("node.fabric", "--fabric",
        "open a libfabric RMA endpoint beside TCP, on this provider: verbs (InfiniBand, "
        "RoCE; rdma-core), efa (AWS), tcp (libfabric over sockets: tests, no RDMA "
        "hardware), auto (the first of verbs, efa, tcp found) or off. Welcomes advertise "
        "it; workers with transport auto or fabric then send their chunks as RMA writes "
        "into slots registered once (one-node and hierarchical jobs). FI_PROVIDER and "
        "the other FI_* variables of libfabric apply",
        c.fabric),
    def("node.fabric_slots", "--fabric-slots",
        "receive slots (each one chunk) the node registers and grants every fabric "
        "worker: how many of its frames may be in flight (1 to 4096; fewer, down to 4, "
        "where a job's chunks would take more than 64 MiB per worker); registered memory "
        "counts against the locked-memory limit (ulimit -l)",
        c.fabric_slots),
    def(
      "node.fabric_nics", "--fabric-nics",
      "the NICs to open a fabric endpoint on, each with its own receive pool and poller "
      "in the NIC's NUMA domain (workers go to the least loaded): 'all' the provider "
      "offers, or names separated by commas (RDMA devices such as mlx5_0,mlx5_1; "
      "interfaces for the tcp provider). Empty: the one serving the first --listen "
      "address",
      c.fabric_nics),
    number_or_text(
      "node.fabric_endpoints", "--fabric-endpoints",
      "fabric endpoints per NIC: N or auto. Each has its own libfabric domain, poller "
      "thread and 1/N of the NIC's receive pool (--fabric-pool), and a worker's fabric "
      "connection goes to the least loaded: an endpoint's transmit progress runs one "
      "thread at a time. auto: on the tcp provider (the CPU moves every byte) as "
      "many as --pollers auto gives the machine, shared among the NICs (1 under 8 "
      "cores); on verbs and efa (the NIC moves them) 1. The choice and why are logged "
      "at start",
      c.fabric_endpoints),
    def("node.fabric_pool_mib", "--fabric-pool",
        "MiB of receive memory each NIC allocates on its NUMA domain and registers once "
        "at start, shared out evenly among its fabric endpoints (--fabric-endpoints); "
        "each fabric worker's slots are lent from its endpoint's share (at most half of "
        "what is free, so later workers get fewer slots; a worker whose smallest window "
        "does not fit is refused and stays on TCP). Counts against ulimit -l",
        c.fabric_pool_mib),
    def("scheduling.priority", "--priority",
        "when requests queue, serve the worker furthest behind first (--no-priority: "
        "arrival order)",
        c.priority),
    def("node.kernels", "--kernels",
        "aggregation kernels: auto (the best this CPU runs), scalar, avx2, avx512",
        c.kernels),
    def("shards.count", "--shards",
        "chunk shards (serving cores); 0 = one per allowed core, but for the pollers' "
        "cores on a machine of 8 cores or more",
        c.shards),
    number_or_text(
      "shards.job_kib_per_shard", "--job-kib-per-shard",
      "how many shards serve a job: one per N KiB of its parameters on this node (at "
      "least one, at most all; the least loaded of each NUMA domain's), so a small "
      "job's step touches few shards; the in-node balancer (--balance) widens a job "
      "that gets busy. 0: every job over every shard. auto: 1024 on a node of 8 shards "
      "or more, 0 below. Flat one-node jobs without a layer-wise optimizer; the choice "
      "is logged at start, each job's shards when it starts",
      c.job_kib_per_shard),
    def("shards.cores", "--shard-cores", "OS CPU numbers shards may use (default: all)",
        c.shard_cores),
    def("shards.numa", "--shard-numa", "NUMA domains shards may use (default: all)",
        c.shard_numa),
    def("shards.balance", "--balance",
        "in-node balancing: every --balance-ms the node compares its shards' CPU time; "
        "when one is busier than the least busy shard of its NUMA domain by more than "
        "--balance-ratio (and 5 points of a core) three times in a row, chunks of a job "
        "move between them, at once and with all their state (flat jobs without "
        "replicas or a layer-wise optimizer; logged as 'balance:'). --no-balance: "
        "chunks stay where the job's routes first put them",
        c.balance),
    def("shards.balance_ms", "--balance-ms",
        "how often (ms) the shards' busy time is compared for --balance", c.balance_ms),
    def("shards.balance_ratio", "--balance-ratio",
        "how many times busier than the least busy shard a shard must be for --balance "
        "to move chunks from it (more than 1)",
        c.balance_ratio),
    def("buffers.prealloc", "--prealloc-buffers",
        "receive buffers of the default chunk size (256 KiB) each poller allocates at "
        "start (NUMA-local, reused)",
        c.prealloc_buffers),
    def("limits.max_chunk_bytes", "--max-chunk-bytes",
        "largest chunk size a job may ask for", c.max_chunk_bytes),
    def("limits.max_control_bytes", "--max-control-bytes",
        "largest hello/error payload accepted", c.max_control_bytes),
    def("limits.max_workers", "--max-workers", "largest job (workers) accepted",
        c.max_workers),
    def("limits.max_job_mib", "--max-job-mib",
        "node memory (MiB) one job's parameters and optimizer state may take; 0 = half "
        "the machine's RAM",
        c.max_job_mib),
    def("timeouts.step_ms", "--step-timeout-ms",
        "how long a step waits for missing workers before the job fails",
        c.step_timeout_ms),
    def("timeouts.slow_step_ms", "--slow-step-ms",
        "how long a step may wait for its slowest ranks before the node names them and "
        "the chunks they have not pushed (a warning once per step, and in job status; "
        "0: never)",
        c.slow_step_ms),
    def("timeouts.rejoin_ms", "--rejoin-timeout-ms",
        "how long a worker that disconnected without bye may take to join again with "
        "its rank (a restarted process) before its job fails; its steps wait meanwhile",
        c.rejoin_timeout_ms),
    def("limits.max_peer_connections", "--max-peer-connections",
        "connections one host (IP address) may hold to one --listen endpoint; more are "
        "refused (0: no limit)",
        c.max_peer_connections),
    def("limits.max_peer_strangers", "--max-peer-strangers",
        "connections that have not joined a job one host (IP address; every loopback "
        "address is one host) may hold to one --listen endpoint, of the 256 an "
        "endpoint holds: more from that host are refused at once, so one host cannot "
        "keep every other out (0: no share per host)",
        c.max_peer_strangers),
    def("limits.max_open_jobs_per_peer", "--max-open-jobs-per-peer",
        "with --open-jobs: live jobs one host's workers may have created on this node; "
        "a hello that would create more is refused (0: no limit)",
        c.max_open_jobs_per_peer),
    def("limits.max_open_jobs_mib", "--max-open-jobs-mib",
        "with --open-jobs: node memory (MiB) every live open job together may take "
        "(parameters, optimizer state, bookkeeping); a hello that would create one past "
        "it is refused; 0 = --max-job-mib (so strangers' hellos take no more than one "
        "job may)",
        c.max_open_jobs_mib),
    def("limits.send_queue_mib", "--send-queue-mib",
        "bytes (MiB) the node may hold queued for one peer that reads slower than the "
        "node sends (never blocking a shard or poller); a peer past it is cut off; 0: no "
        "queue, a send waits for the peer (up to --io-timeout-ms), stalling its shard",
        c.send_queue_mib),
    def("timeouts.io_ms", "--io-timeout-ms",
        "how long a peer may take none of what is sent to it before its connection is "
        "closed",
        c.io_timeout_ms),
    def("timeouts.first_frame_ms", "--first-frame-timeout-ms",
        "a connection to a --listen endpoint that has not joined a job sends each frame "
        "whole within this long of its first byte and is not idle this long (connecting "
        "counts; waiting for the node's answer to its hello does not), else it is "
        "closed; at most 256 such connections per endpoint; 0: never closed for it",
        c.first_frame_ms),
    def("limits.max_unjoined_mib", "--max-unjoined-mib",
        "memory (MiB) the node holds, over all its endpoints, for the payloads of "
        "connections that have not joined a job (hellos, proofs, attaches: taken as "
        "their bytes arrive); a frame that would pass it closes its connection",
        c.max_unjoined_mib),
    def("timeouts.keep_finished_ms", "--keep-finished-ms",
        "how long a finished job's chunks stay on the node so a checkpoint of it can "
        "still be taken (the newest 4 jobs at most); then their memory is released; 0: "
        "at once",
        c.keep_finished_ms),
    def("cluster.coordinator", "--coordinator",
        "join the cluster whose coordinator any node at this HOST:PORT (its --listen "
        "address) points to; empty: this rack-agg embeds the coordinator",
        c.coordinator),
    def("cluster.control", "--control",
        "HOST:PORT where this node's coordinator (embedded or --role coordinator) "
        "takes CAF messages from nodes and shells; empty: the first --listen host, "
        "any free port (found through locate, so nobody needs to know it)",
        c.control),
    def("cluster.open_jobs", "--open-jobs",
        "let a worker's hello create a job nobody created, without a token (for "
        "development and benchmarks; --no-open-jobs: every job comes from the "
        "coordinator and its workers prove its token)",
        c.open_jobs),
    def("node.debuggable", "--debuggable",
        "let processes of this node's user attach a debugger, read its memory, open "
        "its shared memory (jobs' parameters, the doorbell) through /proc, and let it "
        "dump core. Off by default: rw-node makes itself non-dumpable, so only root "
        "(CAP_SYS_PTRACE) can, and colocated workers get its shared memory only as "
        "descriptors handed to them after their hello was admitted",
        c.debuggable),
    def("cluster.secret_file", "--cluster-secret-file",
        "file holding the cluster secret (first line, 16+ characters, chmod 600): the "
        "control plane is then mutual TLS with certificates derived from the secret "
        "(without --tls-*), so a process without it is refused before any CAF message, "
        "and the coordinator hears only nodes and shells that prove it; members and "
        "rw-shell give the same file (docs/security.md). Empty: the control plane is "
        "open to anyone who reaches it, "
        "so the node refuses to start unless its control port and --listen addresses are "
        "loopback (127.0.0.0/8, ::1, localhost), TLS is on, or --insecure is given",
        c.cluster_secret_file),
    def("cluster.insecure", "--insecure",
        "start without --cluster-secret-file (and without TLS) although the control port "
        "or a --listen address is reachable from other hosts: every process that reaches "
        "the control port is an operator (creates, stops and deletes jobs, drains nodes, "
        "takes checkpoints). Logs a warning naming what is open",
        c.insecure),
    def("checkpoint.root", "--checkpoint-root",
        "directory (existing) under which checkpoints are written and restored from: "
        "rw.checkpoint's directory and a job's restore and checkpoint_dir must resolve "
        "under it (a relative path is taken under it; '..' or a symbolic link leading "
        "out is refused). Every node and the coordinator check against their own. "
        "Empty: no checkpoint or restore path is taken",
        c.checkpoint_root),
    def("cluster.tenants_file", "--tenants-file",
        "coordinator: TOML file of tenants (one table each: secret_file, max_jobs, "
        "max_workers, max_memory_mib; config/examples/tenants.toml). A shell that proves "
        "a tenant's secret at the tenant door (rw-shell --tenant NAME "
        "--tenant-secret-file F) sees and controls only that tenant's jobs, named "
        "TENANT:NAME, within its quotas; the cluster secret stays the operators'. Needs "
        "--cluster-secret-file. Empty: no tenants (and no tenant door)",
        c.tenants_file),
    def("cluster.tenant_listen", "--tenant-listen",
        "coordinator with --tenants-file: HOST:PORT of the tenant door, where tenants' "
        "shells connect (both sides prove the tenant's secret, then every frame is "
        "sealed; docs/security.md). Nodes name it in their located answers, so shells "
        "need only a node's address. Empty: the --control host, any free port",
        c.tenant_listen),
    def("cluster.tls_cert", "--tls-cert",
        "PEM certificate (chain) for TLS on the control plane: with --tls-key and "
        "--tls-ca, every connection between nodes, shells and the coordinator is TLS "
        "with mutual certificate checks (a job's token never crosses in clear); peers "
        "without a certificate from the same CA are refused. Empty: plain TCP",
        c.tls_cert),
    def("cluster.tls_key", "--tls-key",
        "PEM private key of --tls-cert, unencrypted, chmod 600 (a key others can read "
        "is refused)",
        c.tls_key),
    def("cluster.tls_ca", "--tls-ca",
        "PEM certificate of the CA that signed every member's certificate (nodes', "
        "shells', the coordinator's)",
        c.tls_ca),
    def("cluster.heartbeat_ms", "--heartbeat-ms",
        "how often a rack-agg node tells the coordinator it is alive", c.heartbeat_ms),
    def("cluster.state_db", "--state-db",
        "coordinator (embedded or --role coordinator): keep the job registry (jobs, "
        "specs, layouts, tokens, the job id counter) in this SQLite file, written before "
        "each answer, so a coordinator started again with it has its jobs back and their "
        "tokens still admit workers. Created 0600; a file others may read is refused (it "
        "holds the tokens); a damaged one stops the node. Empty: in memory only, lost "
        "when the coordinator stops",
        c.state_db),
    def("cluster.node_timeout_ms", "--node-timeout-ms",
        "coordinator: a node silent this long has left and its jobs fail",
        c.node_timeout_ms),
    def("testing.delay_answers", "--test-delay-answers",
        "for tests only, never in production: TENSOR:MS[,TENSOR:MS...] holds each update "
        "of these tensors (by their index in the job, in every job) MS ms (1 to 60000) "
        "before sending it, so that a worker's answers arrive out of the order it "
        "pushed them (a test of the waits in rackweave.torch); logged at start. Empty "
        "(the default): none",
        c.test_delay_answers),
  };
}

} // namespace

void add_node_options(CLI::App& app, node_config& cfg, std::string& config_file) {
  app
    .add_option("--config", config_file,
                "TOML file with any of the keys below (flags given here win)")
    ->check(CLI::ExistingFile);
  for (auto& d : option_table(cfg))
    d.add(app);
}

void load_node_config(const std::string& path, const CLI::App& app, node_config& cfg) {
  toml::table file;
  try {
    file = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                         e.source().begin.column, e.description()));
  }
  auto table = option_table(cfg);
  std::set<std::string> known;
  for (auto& d : table)
    known.insert(d.key);
  // Every key in the file must be one we know.
  for (auto& [section, node] : file) {
    auto* sub = node.as_table();
    if (sub == nullptr)
      throw std::runtime_error(
        fmt::format("{}: '{}' must be a [section]", path, std::string(section.str())));
    for (auto& [name, value] : *sub) {
      auto key = fmt::format("{}.{}", section.str(), name.str());
      if (known.count(key) == 0)
        throw std::runtime_error(fmt::format("{}: unknown key '{}'", path, key));
    }
  }
  for (auto& d : table) {
    if (app.count(d.flag) > 0 || (!d.negation.empty() && app.count(d.negation) > 0))
      continue; // the command line wins
    auto node = file.at_path(d.key);
    if (!node)
      continue;
    try {
      d.set(*node.node());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
    }
  }
}

void check_node_config(const node_config& cfg) {
  if (cfg.role != "rack-agg" && cfg.role != "coordinator")
    throw std::runtime_error(fmt::format(
      "unknown role '{}': a node is --role rack-agg or --role coordinator", cfg.role));
  if (cfg.role == "coordinator" && !cfg.coordinator.empty())
    throw std::runtime_error("--coordinator is for rack-agg nodes joining a cluster; a "
                             "--role coordinator node is the coordinator");
  if (!cfg.coordinator.empty() && !cfg.state_db.empty())
    throw std::runtime_error("--state-db is the coordinator's: a rack-agg that joins a "
                             "cluster (--coordinator) runs none");
  if (cfg.heartbeat_ms == 0 || cfg.node_timeout_ms < 2 * cfg.heartbeat_ms)
    throw std::runtime_error(fmt::format(
      "--node-timeout-ms ({}) must be at least twice --heartbeat-ms ({}), which must be "
      "above 0",
      cfg.node_timeout_ms, cfg.heartbeat_ms));
  if (cfg.log_format != "text" && cfg.log_format != "json")
    throw std::runtime_error(
      fmt::format("--log-format is text or json, not '{}'", cfg.log_format));
  if (cfg.log_max_mib == 0 || cfg.log_max_mib > 1024 * 1024)
    throw std::runtime_error("--log-max-mib must be 1 to 1048576");
  if (cfg.log_files == 0 || cfg.log_files > 1000)
    throw std::runtime_error("--log-files must be 1 to 1000");
  if (!cfg.metrics.empty()) {
    auto colon = cfg.metrics.rfind(':');
    auto port = colon == std::string::npos ? std::string()
                                           : cfg.metrics.substr(colon + 1);
    if (colon == 0 || port.empty() || port.size() > 5
        || port.find_first_not_of("0123456789") != std::string::npos
        || std::stoul(port) > 65535)
      throw std::runtime_error(fmt::format(
        "--metrics wants HOST:PORT (port 0: any free one), not '{}'", cfg.metrics));
  }
  if (!cfg.metrics_token_file.empty() && cfg.metrics.empty())
    throw std::runtime_error("--metrics-token-file protects the --metrics endpoint: give "
                             "--metrics HOST:PORT too");
  static const std::set<std::string> levels{"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
  if (levels.count(cfg.log_level) == 0)
    throw std::runtime_error(fmt::format(
      "unknown log level '{}' (trace, debug, info, warn, error, off)", cfg.log_level));
  if (cfg.max_chunk_bytes < 4 || cfg.max_chunk_bytes % 4 != 0
      || cfg.max_chunk_bytes > 256u * 1024 * 1024)
    throw std::runtime_error("--max-chunk-bytes must be a multiple of 4 up to 256 MiB");
  if (cfg.max_control_bytes < 1024)
    throw std::runtime_error("--max-control-bytes must be at least 1024");
  if ((uint64_t{cfg.max_unjoined_mib} << 20) < cfg.max_control_bytes)
    throw std::runtime_error(
      fmt::format("--max-unjoined-mib {} cannot hold one hello of --max-control-bytes {}",
                  cfg.max_unjoined_mib, cfg.max_control_bytes));
  if (cfg.max_workers == 0)
    throw std::runtime_error("--max-workers must be at least 1");
  if (cfg.listen.empty())
    throw std::runtime_error("at least one --listen address is needed");
  pollers_per_listen(cfg);       // throws on a bad --pollers
  fabric_endpoints_per_nic(cfg); // throws on a bad --fabric-endpoints
  job_kib_per_shard(cfg);        // throws on a bad --job-kib-per-shard
  static const std::set<std::string> isas{"auto", "scalar", "avx2", "avx512"};
  if (isas.count(cfg.kernels) == 0)
    throw std::runtime_error(
      fmt::format("unknown kernels '{}' (auto, scalar, avx2, avx512)", cfg.kernels));
  static const std::set<std::string> fabrics{"off", "auto", "verbs", "efa", "tcp"};
  if (fabrics.count(cfg.fabric) == 0)
    throw std::runtime_error(fmt::format(
      "unknown fabric provider '{}' (auto, verbs, efa, tcp, off)", cfg.fabric));
  if (cfg.fabric_pool_mib < 1 || cfg.fabric_pool_mib > (1u << 20))
    throw std::runtime_error(fmt::format(
      "--fabric-pool must be 1 to 1048576 MiB (it is {})", cfg.fabric_pool_mib));
  if (cfg.fabric_slots == 0 || cfg.fabric_slots > 4096)
    throw std::runtime_error(
      fmt::format("--fabric-slots must be 1 to 4096 (it is {})", cfg.fabric_slots));
  if (cfg.send_queue_mib > (1u << 20))
    throw std::runtime_error(fmt::format(
      "--send-queue-mib must be 0 to 1048576 MiB (it is {})", cfg.send_queue_mib));
  if (cfg.step_timeout_ms == 0 || cfg.io_timeout_ms == 0 || cfg.rejoin_timeout_ms == 0)
    throw std::runtime_error("timeouts must be at least 1 ms");
  test_answer_delays(cfg); // throws on a malformed entry
  if (cfg.balance && (cfg.balance_ms < 100 || !(cfg.balance_ratio > 1.0)))
    throw std::runtime_error(fmt::format(
      "--balance-ms ({}) must be at least 100 and --balance-ratio ({}) above 1 (or turn "
      "balancing off with --no-balance)",
      cfg.balance_ms, cfg.balance_ratio));
}

namespace {
// `text` as a decimal number of 1 to `max_digits` digits and nothing else, into `n`.
bool decimal(const std::string& text, size_t max_digits, uint64_t& n) {
  if (text.empty() || text.size() > max_digits)
    return false;
  n = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9')
      return false;
    n = n * 10 + uint64_t(ch - '0');
  }
  return true;
}

// "auto" (0) or a count from 1 to `max`; throws naming `flag` on anything else.
uint32_t auto_or_count(const std::string& text, const char* flag, uint32_t max) {
  if (text == "auto")
    return 0;
  uint64_t n = 0;
  if (!decimal(text, 3, n) || n < 1 || n > max)
    throw std::runtime_error(fmt::format(
      "{} must be auto or a number from 1 to {} (it is '{}')", flag, max, text));
  return static_cast<uint32_t>(n);
}
} // namespace

uint32_t pollers_per_listen(const node_config& cfg) {
  return auto_or_count(cfg.pollers, "--pollers", max_pollers);
}

uint32_t fabric_endpoints_per_nic(const node_config& cfg) {
  return auto_or_count(cfg.fabric_endpoints, "--fabric-endpoints", max_fabric_endpoints);
}

std::optional<uint64_t> job_kib_per_shard(const node_config& cfg) {
  auto& text = cfg.job_kib_per_shard;
  if (text == "auto")
    return std::nullopt;
  uint64_t n = 0;
  if (!decimal(text, 10, n) || n > max_job_kib_per_shard)
    throw std::runtime_error(
      fmt::format("--job-kib-per-shard must be auto or a number of KiB from 0 to {} (it "
                  "is '{}')",
                  max_job_kib_per_shard, text));
  return n;
}

std::map<uint32_t, std::chrono::milliseconds> test_answer_delays(const node_config& cfg) {
  std::map<uint32_t, std::chrono::milliseconds> out;
  const auto& text = cfg.test_delay_answers;
  if (text.empty())
    return out;
  for (size_t at = 0; at <= text.size();) { // every entry, an empty one too ("2:5,")
    auto end = std::min(text.find(',', at), text.size());
    auto entry = text.substr(at, end - at);
    at = end + 1;
    auto colon = entry.find(':');
    uint64_t tensor = 0;
    uint64_t ms = 0;
    if (colon == std::string::npos || !decimal(entry.substr(0, colon), 9, tensor)
        || !decimal(entry.substr(colon + 1), 9, ms) || ms < 1
        || ms > max_test_answer_delay_ms)
      throw std::runtime_error(fmt::format(
        "--test-delay-answers: '{}' is not TENSOR:MS (a tensor index, then 1 to {} ms)",
        entry, max_test_answer_delay_ms));
    if (!out.emplace(static_cast<uint32_t>(tensor), std::chrono::milliseconds(ms)).second)
      throw std::runtime_error(
        fmt::format("--test-delay-answers: tensor {} is given twice", tensor));
  }
  return out;
}

} // namespace rw::runtime
