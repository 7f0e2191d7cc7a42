#pragma once
// rw-bench comm's options, shared by the driver (apps/rw_bench.cpp) and its worker
// processes (apps/bench/comm_worker.cpp), and what both derive from them.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/defaults.hpp"
#include "rackweave/job_spec.hpp"

namespace rw::bench {

struct comm_args {
  std::string connect = defaults::listen;
  uint32_t workers = 2;
  std::string bytes_text = "16MiB";
  uint32_t iters = 10;
  uint32_t warmup = 1;
  std::string chunk_text = "256KiB"; // defaults::chunk_bytes
  std::string
    trace; // "": none; each rank writes TRACE.rankR.json (worker_options::trace)
  std::string push_window_text; // "" : the worker's default (defaults::push_window_bytes)
  uint32_t layers = 0; // 0: one tensor; N: N layers, a weight and a small bias each
  uint64_t checkpoint_every = 0; // periodic checkpoints of the job (0: none)
  std::string checkpoint_dir;
  std::string job;
  bool verify = false;
  bool barrier = false; // every worker ready before each iteration (untimed)
  bool json = false;
  std::string transport = "tcp";
  std::string consistency = "bsp";
  std::string compression = "none"; // none, bf16, fp16, topk:R
  bool updates_on = false;          // --compress-updates
  bool updates_off = false; // --no-compress-updates (neither: yes for bf16 / fp16)
  std::string straggler;    // "RANK:DELAY", e.g. 1:50ms
  uint32_t timeout_s = 600;
  bool open_job = false;    // join an --open-jobs node's job without the coordinator
  std::string worker_racks; // comma-separated rack per rank
  std::string reduction = "auto";
  int replicas = -1;       // -1: the coordinator's default
  std::string secret_file; // --cluster-secret-file
  uint32_t rank = 0;       // comm-worker only
  std::string stop_file;   // comm-worker only: the pacing worker creates it when done
  std::string token_file;  // comm-worker only: the job's token
  long parent = 0;         // comm-worker only: rw-bench's PID (it ends with it)
  std::string rank_racks;  // comm-worker only: hierarchical sum order (rack per rank)
  std::string rack;        // comm: one rack option for every worker, or one per rank
                           // (A,B,...); comm-worker: this worker's rack option
};

/// "a,b,c" -> {"a", "b", "c"}; "" -> {}. Throws std::invalid_argument on an empty entry.
std::vector<std::string> split_list(const std::string& text);

struct straggler_spec {
  int rank = -1; // none
  std::chrono::microseconds delay{0};
};

/// "1:50ms", "2:0.2s", "0:100us" (a bare number is milliseconds); "" is none. Throws
/// std::invalid_argument saying what is wrong.
straggler_spec parse_straggler(const std::string& text, uint32_t workers);

/// Whether the job's results travel as 16-bit values too: --compress-updates /
/// --no-compress-updates, by default yes where the gradients do (bf16, fp16).
bool compress_updates(const comm_args& a);

/// The benchmark's job, as the coordinator creates it (no tensors: workers declare them).
job_spec bench_spec(const comm_args& a);

/// Elements of each layer's bias with --layers.
constexpr uint64_t bias_elems = 256;

/// The tensors the gradient of `elems` elements is cut into, in order, end to end:
/// "gradient" whole (layers 0), or per layer "layerI.w" then "layerI.b" (bias_elems;
/// the weights share the rest, the last one taking the remainder). Throws
/// std::invalid_argument when a weight would be empty.
std::vector<tensor_spec> bench_tensors(uint64_t elems, uint32_t layers);

} // namespace rw::bench
