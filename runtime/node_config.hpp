#pragma once
// rw-node's configuration: every key of the TOML file (config/*.toml) is also a
// command-line flag, because both are generated from one table of options. A flag
// given on the command line wins over the file.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rackweave/defaults.hpp"

namespace CLI {
class App;
}

namespace rw::runtime {

struct node_config {
  std::string role = "rack-agg";
  std::string name;       // default: the host name
  std::string rack;       // default: the host name
  double uplink_gbps = 0; // the rack's links to this node; 0 = unknown
  double core_gbps = 0;   // this node's link into the core; 0 = unknown
  std::vector<std::string> listen{
    defaults::listen};          // HOST:PORT, --pollers endpoints each
  std::string pollers = "auto"; // NIC pollers per --listen address: N or auto
  std::string log_level = "info";
  std::string log_file;            // "": stderr only
  std::string log_format = "text"; // text or json (one object per line)
  uint32_t log_max_mib = 100;      // --log-file rotates at this size
  uint32_t log_files = 5;          // rotated files kept beside it
  std::string trace;               // Chrome trace-event JSON of the node's steps; "": off
  uint32_t stats_interval_s = 60;  // the periodic throughput line; 0: none
  std::string metrics;             // HOST:PORT of /metrics, /healthz, /readyz; "": none
  std::string metrics_token_file;  // /metrics asks for this bearer token; "": open
  bool pin = true;                 // pin shards and pollers to cores
  bool shm = true;                 // colocated workers may use shared memory
  std::string fabric = "off";      // libfabric provider: auto, verbs, efa, tcp, off
  uint32_t fabric_slots = 256;     // receive slots (credits) per fabric peer
  uint32_t fabric_pool_mib = 256;  // receive pool registered at start, lent to peers
  std::string fabric_nics;         // NICs with a fabric endpoint: "", "all" or names
  std::string fabric_endpoints = "auto"; // fabric endpoints (domains) per NIC: N or auto
  bool priority = true;                  // serve the worker furthest behind first
  /// For tests only: "TENSOR:MS[,TENSOR:MS...]" holds each update of these tensors (by
  /// index in the job, in every job) this long before it is sent (test_answer_delays).
  std::string test_delay_answers;
  std::string kernels = "auto";           // auto, scalar, avx2, avx512
  uint32_t shards = 0;                    // serving cores; 0 = auto (placement.hpp)
  std::string job_kib_per_shard = "auto"; // a job's shards: a shard per N KiB, or auto
  std::vector<uint32_t> shard_cores;      // OS CPU numbers shards may use; empty = all
  std::vector<uint32_t> shard_numa;       // NUMA domains shards may use; empty = all
  bool balance = true;                    // move chunks from a busy shard to an idle one
  uint32_t balance_ms = defaults::balance_ms; // how often shards' busy time is compared
  double balance_ratio = defaults::balance_ratio; // how much busier is too busy
  uint32_t prealloc_buffers = 64; // receive buffers (of the default chunk) per poller
  uint32_t max_chunk_bytes = defaults::max_chunk_bytes;
  uint32_t max_control_bytes = defaults::max_control_bytes;
  uint32_t max_workers = defaults::max_workers;
  uint32_t max_job_mib = 0; // node memory one job may take; 0 = half the RAM
  uint32_t step_timeout_ms = defaults::step_timeout_ms;
  uint32_t slow_step_ms = defaults::slow_step_ms; // a step waiting longer is named
  uint32_t rejoin_timeout_ms = defaults::rejoin_timeout_ms;
  uint32_t io_timeout_ms = defaults::io_timeout_ms;
  uint32_t send_queue_mib = defaults::send_queue_mib; // queued for one slow peer, at most
  uint32_t max_peer_connections = defaults::max_peer_connections; // per host and endpoint
  uint32_t max_peer_strangers =
    defaults::max_peer_strangers; // unjoined, per host, endpoint
  uint32_t max_open_jobs_per_peer = defaults::max_open_jobs_per_peer; // --open-jobs only
  uint32_t max_open_jobs_mib = 0; // --open-jobs: every open job together; 0 = max_job_mib
  uint32_t first_frame_ms =
    defaults::first_frame_ms; // a stranger's frame deadline, idle limit
  uint32_t max_unjoined_mib = defaults::max_unjoined_mib; // held for strangers' payloads
  uint32_t keep_finished_ms = defaults::keep_finished_ms; // finished jobs' chunks kept
  // The cluster
  std::string coordinator; // any node's --listen address; "" = embed it
  std::string control;     // the coordinator's middleman HOST:PORT
  bool open_jobs = false;  // a worker's hello may create a job, no token
  /// Leave the process dumpable: processes of its user may then attach a debugger, read
  /// its memory and open its shared memory by /proc name (rw-node clears the flag
  /// otherwise; docs/security.md).
  bool debuggable = false;
  std::string cluster_secret_file; // nodes and shells prove this secret; "" = none
  /// Start without a secret although the control port or --listen is reachable beyond
  /// this host (runtime/control_exposure.hpp); a warning names what is open.
  bool insecure = false;
  /// Checkpoints and restores only under this directory (runtime/checkpoint/root.hpp);
  /// "" = none: every checkpoint or restore path is refused.
  std::string checkpoint_root;
  std::string tenants_file; // coordinator: tenants (runtime/tenants.hpp); "" = none
  std::string
    tenant_listen; // its tenant door's HOST:PORT; "" = the control host, any port
  // TLS on the control plane (CAF's OpenSSL module): PEM files, all three or none.
  std::string tls_cert; // this node's certificate (chain)
  std::string tls_key;  // its private key, chmod 600
  std::string tls_ca;   // the CA that signed every member's certificate
  uint32_t heartbeat_ms = defaults::heartbeat_ms;
  /// The coordinator's state database (SQLite): the job registry survives a restart.
  /// Empty: kept in memory only.
  std::string state_db;
  uint32_t node_timeout_ms = defaults::node_timeout_ms;
};

/// Adds every option (and --config) to `app`, bound to `cfg`.
void add_node_options(CLI::App& app, node_config& cfg, std::string& config_file);

/// Reads `path` into `cfg`, leaving alone what was given on the command line of `app`.
/// Throws std::runtime_error naming the file, key and problem (unknown keys included).
void load_node_config(const std::string& path, const CLI::App& app, node_config& cfg);

/// Checks values that parse but make no sense; throws std::runtime_error.
void check_node_config(const node_config& cfg);

/// The most NIC pollers one --listen address may have.
constexpr uint32_t max_pollers = 64;

/// --pollers as a number: 0 for auto, else 1..max_pollers; throws on anything else.
uint32_t pollers_per_listen(const node_config& cfg);

/// The most fabric endpoints one NIC may have.
constexpr uint32_t max_fabric_endpoints = 16;

/// --fabric-endpoints as a number: 0 for auto, else 1..max_fabric_endpoints; throws on
/// anything else.
uint32_t fabric_endpoints_per_nic(const node_config& cfg);

/// The most a --test-delay-answers entry may hold an answer (ms).
constexpr uint32_t max_test_answer_delay_ms = 60000;

/// --test-delay-answers: tensor index -> delay; throws naming the entry that is not
/// TENSOR:MS (MS from 1 to max_test_answer_delay_ms) or repeats a tensor.
std::map<uint32_t, std::chrono::milliseconds> test_answer_delays(const node_config& cfg);

/// The largest --job-kib-per-shard (1 TiB of a job's parameters per shard).
constexpr uint64_t max_job_kib_per_shard = uint64_t{1} << 30;

/// --job-kib-per-shard: nothing for auto (logic/shard_set.hpp decides from the shard
/// count), else 0..max_job_kib_per_shard KiB; throws on anything else.
std::optional<uint64_t> job_kib_per_shard(const node_config& cfg);

} // namespace rw::runtime
