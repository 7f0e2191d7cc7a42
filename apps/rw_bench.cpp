// rw-bench: measures RackWeave as a user sees it.
//
//   rw-bench comm --connect 127.0.0.1:7700 --workers 4 --bytes 64MiB --iters 10 --verify
//   rw-bench comm --connect 127.0.0.1:7700 --workers 4 --worker-racks a,a,b,b --json
//   rw-bench comm --connect 127.0.0.1:7700 --workers 4 --rack a,b,a,b --reduction hierarchical
//
// creates a job through the cluster coordinator (found through the node at --connect;
// placed on the workers' racks, or on that node), starts W worker processes that
// push_pull deterministic pseudo-random gradients through it (optimizer `sum`, so the
// result is the exact all-reduce), reports the step time, and deletes the job. With
// --open-job the workers create the job themselves on a node started with
// --open-jobs, without the coordinator. With --verify every worker checks every element
// of every result bitwise against the rank-order sum it computes itself.

#include <algorithm>
#include <fstream>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "apps/bench/cluster_job.hpp"
#include "apps/bench/comm_args.hpp"
#include "apps/bench/comm_worker.hpp"
#include "apps/tools/crash_report.hpp"
#include "apps/tools/exit_codes.hpp"
#include "apps/tools/subprocess.hpp"
#include "apps/tools/units.hpp"
#include "rackweave/errc.hpp"

namespace {

using namespace rw::bench;
using clock_type = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  auto idx = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

int run_driver(comm_args a, const std::string& command) {
  auto bytes = rw::tools::parse_bytes(a.bytes_text);
  if (bytes == 0 || bytes % 4 != 0)
    throw std::invalid_argument("--bytes must be a positive multiple of 4");
  if (a.workers == 0 || a.iters == 0)
    throw std::invalid_argument("--workers and --iters must be at least 1");
  auto model = rw::parse_consistency(a.consistency);       // says what is wrong
  auto compression = rw::parse_compression(a.compression); // says what is wrong
  const bool updates = compress_updates(a);
  if (updates && compression.kind != rw::compression_spec::bf16
      && compression.kind != rw::compression_spec::fp16)
    throw std::invalid_argument(
      "--compress-updates needs --compression bf16 or fp16 (results "
      "travel as 16-bit values of the same format)");
  parse_straggler(a.straggler, a.workers);
  bench_tensors(bytes / 4, a.layers); // says what is wrong
  if ((a.checkpoint_every != 0) != !a.checkpoint_dir.empty())
    throw std::invalid_argument("--checkpoint-every and --checkpoint-dir go together");
  if (a.checkpoint_every != 0 && a.open_job)
    throw std::invalid_argument(
      "--checkpoint-every needs a job made through the coordinator, "
      "not --open-job");
  if (a.layers != 0 && a.transport == "shm")
    throw std::invalid_argument("--layers runs over TCP: shared memory gives each tensor "
                                "its own place, not one gradient end to end");
  if (a.verify && model.model != rw::consistency_spec::bsp)
    throw std::invalid_argument(
      "--verify checks the exact BSP result: it needs --consistency bsp");
  const bool joins = !a.token_file.empty(); // a job somebody made, with its token
  if (joins) {
    if (a.open_job)
      throw std::invalid_argument(
        "--token-file joins a job made through the coordinator; "
        "--open-job makes one on the node: give one of them");
    if (a.job.empty())
      throw std::invalid_argument(
        "--token-file needs --job: the name of the job its token "
        "is for");
    if (!a.worker_racks.empty() || a.reduction != "auto" || a.replicas >= 0
        || a.checkpoint_every != 0)
      throw std::invalid_argument(
        "--token-file joins the job as it was made: it takes no "
        "--worker-racks, --reduction, --replicas or "
        "--checkpoint-every");
    std::ifstream token{a.token_file};
    std::string line;
    if (!std::getline(token, line) || line.empty())
      throw std::invalid_argument("cannot read a job token from --token-file "
                                  + a.token_file);
  }
  a.stop_file = fmt::format("/tmp/rw-bench-{}-{}.stop", getpid(),
                            clock_type::now().time_since_epoch().count());
  if (a.job.empty())
    a.job = fmt::format("bench-{}-{}", getpid(),
                        clock_type::now().time_since_epoch().count() % 1000000);
  auto racks = split_list(a.worker_racks);
  if (!racks.empty() && racks.size() != a.workers)
    throw std::invalid_argument(
      fmt::format("--worker-racks names {} racks for {} workers: "
                  "give one per worker",
                  racks.size(), a.workers));
  auto rack_options = split_list(a.rack);
  if (rack_options.size() == 1)
    rack_options.assign(a.workers, rack_options.front());
  if (!rack_options.empty() && rack_options.size() != a.workers)
    throw std::invalid_argument(
      fmt::format("--rack names {} racks for {} workers: give one "
                  "for all, or one per worker",
                  rack_options.size(), a.workers));
  if (a.open_job && (!racks.empty() || a.reduction != "auto" || a.replicas >= 0))
    throw std::invalid_argument(
      "--open-job runs on one node: it takes no --worker-racks, "
      "--reduction or --replicas");
  std::unique_ptr<rw::bench::cluster_job> job;
  if (!a.open_job && !joins) {
    rw::bench::cluster_job_request req;
    req.connect = a.connect;
    req.secret_file = a.secret_file;
    req.spec = bench_spec(a);
    req.worker_racks = racks;
    req.rack_options = rack_options;
    req.reduction = a.reduction;
    req.replicas = a.replicas;
    req.checkpoint_every = a.checkpoint_every;
    req.checkpoint_dir = a.checkpoint_dir;
    job = std::make_unique<rw::bench::cluster_job>(req);
  }
  const std::vector<std::string> one_node{joins ? "(joined job)" : "(open job)"};
  const auto& nodes = job ? job->nodes() : one_node;
  const std::string reduction = job     ? job->reduction()
                                : joins ? "as made"
                                        : "single-node";
  auto self = rw::tools::self_dir() + "/rw-bench";
  std::vector<rw::tools::subprocess> kids;
  for (uint32_t r = 0; r < a.workers; ++r) {
    std::vector<std::string> argv{self,
                                  "comm-worker",
                                  "--connect",
                                  job ? job->connect_of(r) : a.connect,
                                  "--rank",
                                  std::to_string(r),
                                  "--workers",
                                  std::to_string(a.workers),
                                  "--bytes",
                                  a.bytes_text,
                                  "--iters",
                                  std::to_string(a.iters),
                                  "--warmup",
                                  std::to_string(a.warmup),
                                  "--chunk-bytes",
                                  a.chunk_text,
                                  "--transport",
                                  a.transport,
                                  "--consistency",
                                  a.consistency,
                                  "--compression",
                                  a.compression,
                                  updates ? "--compress-updates"
                                          : "--no-compress-updates",
                                  "--stop-file",
                                  a.stop_file,
                                  "--parent",
                                  std::to_string(static_cast<long>(getpid())),
                                  "--job",
                                  a.job};
    if (!a.straggler.empty()) {
      argv.push_back("--straggler");
      argv.push_back(a.straggler);
    }
    if (a.layers != 0) {
      argv.push_back("--layers");
      argv.push_back(std::to_string(a.layers));
    }
    if (!a.trace.empty()) {
      argv.push_back("--trace");
      argv.push_back(a.trace);
    }
    if (!a.push_window_text.empty()) {
      argv.push_back("--push-window");
      argv.push_back(a.push_window_text);
    }
    if (a.verify)
      argv.push_back("--verify");
    if (a.barrier)
      argv.push_back("--barrier");
    if (!rack_options.empty()) {
      argv.push_back("--rack");
      argv.push_back(rack_options[r]);
    }
    if (joins) {
      argv.push_back("--token-file");
      argv.push_back(a.token_file);
    } else if (job) {
      argv.push_back("--token-file");
      argv.push_back(job->token_file());
      if (!job->rank_racks().empty()) {
        argv.push_back("--rank-racks");
        argv.push_back(fmt::format("{}", fmt::join(job->rank_racks(), ",")));
      }
    }
    kids.emplace_back(argv, true);
  }
  auto deadline = clock_type::now() + std::chrono::seconds(a.timeout_s);
  std::vector<std::vector<double>> times(a.workers);
  std::vector<uint32_t> iterations(a.workers, 0);
  double wire_bytes = 0; // per step, every worker's data frames sent and received
  uint32_t max_staleness = 0;
  bool all_ok = true;
  bool verified = a.verify;
  for (uint32_t r = 0; r < a.workers; ++r) {
    auto out = kids[r].read_all(deadline);
    auto rc = kids[r].wait_until(deadline);
    if (!rc) {
      std::cerr << fmt::format("worker {} did not finish within {} s; stopping it\n", r,
                               a.timeout_s);
      kids[r].stop();
      all_ok = false;
      continue;
    }
    // The RESULT line, wherever it is among what the worker printed.
    auto at = out.rfind("RESULT ");
    while (at != std::string::npos && at > 0 && out[at - 1] != '\n')
      at = out.rfind("RESULT ", at - 1);
    std::istringstream in{at == std::string::npos ? std::string{} : out.substr(at)};
    std::string tag;
    int ok = 0;
    uint32_t stale = 0;
    if (!(in >> tag >> ok >> iterations[r] >> stale) || tag != "RESULT") {
      std::cerr << fmt::format("worker {} failed (exit {})\n", r, *rc);
      all_ok = false;
      continue;
    }
    verified = verified && ok == 1;
    max_staleness = std::max(max_staleness, stale);
    // "WIRE sent received": bytes per timed iteration (printed before RESULT).
    if (auto w = out.rfind("WIRE "); w != std::string::npos && w < at) {
      std::istringstream wire{out.substr(w + 5)};
      double sent = 0, received = 0;
      if (wire >> sent >> received)
        wire_bytes += sent + received;
    }
    double t;
    while (in >> t)
      times[r].push_back(t);
  }
  std::remove(a.stop_file.c_str());
  if (!all_ok)
    return 1;
  // A step is as slow as its slowest worker (per iteration, over the workers that ran it).
  size_t longest = 0;
  for (auto& tw : times)
    longest = std::max(longest, tw.size());
  if (longest == 0)
    return 1;
  std::vector<double> steps(longest, 0.0);
  for (auto& tw : times)
    for (size_t i = 0; i < tw.size(); ++i)
      steps[i] = std::max(steps[i], tw[i]);
  std::vector<double> mean_wait;
  for (auto& tw : times) {
    double sum = 0;
    for (auto t : tw)
      sum += t;
    mean_wait.push_back(tw.empty() ? 0.0 : sum / static_cast<double>(tw.size()));
  }
  auto median = percentile(steps, 0.5);
  auto p90 = percentile(steps, 0.9);
  // Bytes through the node's NIC per step: every worker pushes and receives S.
  auto gbps = 2.0 * a.workers * static_cast<double>(bytes) * 8.0 / (median / 1e3) / 1e9;
  if (a.json) {
    // Three decimals (times to the microsecond), as the text form prints them.
    auto us = [](double x) { return std::round(x * 1e3) / 1e3; };
    auto waits = nlohmann::ordered_json::array();
    for (auto m : mean_wait)
      waits.push_back(us(m));
    nlohmann::ordered_json j{{"workers", a.workers},
                             {"bytes", bytes},
                             {"iters", a.iters},
                             {"consistency", rw::to_string(model)},
                             {"median_ms", us(median)},
                             {"p90_ms", us(p90)},
                             {"goodput_gbps", us(gbps)},
                             {"verified", verified},
                             {"iterations", iterations},
                             {"mean_wait_ms", std::move(waits)},
                             {"max_staleness", max_staleness},
                             {"reduction", reduction},
                             {"nodes", nodes.size()},
                             {"compression", rw::to_string(compression)},
                             {"compress_updates", updates},
                             {"wire_bytes", std::round(wire_bytes)}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
      "rw-bench comm: {} workers x {} (push_pull, optimizer sum, {}), "
      "{} iterations after {} warm-up\n",
      a.workers, rw::tools::format_bytes(bytes), a.transport, a.iters, a.warmup);
    std::cout << fmt::format("  median {:.3f} ms   p90 {:.3f} ms   goodput {:.3f} Gbit/s "
                             "(2 x workers x bytes per step)   verified: {}\n",
                             median, p90, gbps,
                             a.verify ? (verified ? "yes" : "NO") : "not checked");
    std::cout << fmt::format("  consistency {}: iterations per worker [{}], mean wait ms "
                             "[{:.3f}], largest staleness served {}\n",
                             rw::to_string(model), fmt::join(iterations, ", "),
                             fmt::join(mean_wait, ", "), max_staleness);
    std::cout << fmt::format("  job on {} node(s) [{}], reduction {}\n", nodes.size(),
                             fmt::join(nodes, ", "), reduction);
    std::cout << fmt::format(
      "  compression {}{}: {} on the wire per step (every worker's "
      "data frames, both ways; uncompressed: about {})\n",
      rw::to_string(compression), updates ? ", updates too" : "",
      rw::tools::format_bytes(static_cast<uint64_t>(wire_bytes)),
      rw::tools::format_bytes(2 * uint64_t{a.workers} * bytes));
    std::cout << "  command: " << command << "\n";
  }
  return a.verify && !verified ? 3 : 0;
}

void add_common(CLI::App* cmd, comm_args& a) {
  cmd->add_option("--connect", a.connect, "HOST:PORT of the rack-agg node")
    ->capture_default_str();
  cmd->add_option("--workers", a.workers, "worker processes (ranks)")
    ->capture_default_str();
  cmd->add_option("--bytes", a.bytes_text, "gradient size per worker (e.g. 64MiB)")
    ->capture_default_str();
  cmd->add_option("--iters", a.iters, "timed iterations")->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "untimed iterations first")
    ->capture_default_str();
  cmd->add_option("--chunk-bytes", a.chunk_text, "chunk size of the job")
    ->capture_default_str();
  cmd->add_option("--push-window", a.push_window_text,
                  "how far each worker's pushes may run ahead of its answered chunks "
                  "over TCP (e.g. 4MiB; 0: no window; default: the worker's, 16 chunks "
                  "and at least 512KiB)");
  cmd->add_option("--trace", a.trace,
                  "each worker writes its step timeline (Chrome trace-event JSON, one "
                  "event per operation) to TRACE.rankR.json; give rw-node --trace too "
                  "and load them all in ui.perfetto.dev");
  cmd
    ->add_option(
      "--layers", a.layers,
      "cut the gradient into N layers, each a weight and a 256-element bias "
      "(layerI.w, layerI.b), exchanged together each iteration; with "
      "--chunk-bytes near --bytes/N each weight is one chunk and, round-robin, "
      "lands on the same shard: a skewed job (bench/balance.sh). 0: one tensor "
      "(TCP only)")
    ->capture_default_str();
  cmd->add_option("--job", a.job, "job name (default: a fresh one per run)");
  cmd->add_flag("--verify", a.verify, "check every element of every result exactly");
  cmd->add_flag("--barrier", a.barrier,
                "before each iteration, wait until every worker has its gradient ready "
                "(a 4-byte push_pull of its own, not timed), as the peers' harnesses do: "
                "a step is then the exchange alone, not one worker's wait for another's "
                "gradient or check");
  cmd
    ->add_option("--consistency", a.consistency,
                 "bsp, ssp:S (bounded staleness S) or async")
    ->capture_default_str();
  cmd
    ->add_option("--compression", a.compression,
                 "how gradients travel: none, bf16, fp16 (16-bit values, summed in "
                 "float32 on the node) or topk:RATIO (each chunk's largest RATIO of "
                 "gradient plus residual, as sparse pairs; the rest kept for the next "
                 "step; chunks under 1024 elements whole), or topk:RATIO,warmup=STEPS "
                 "(more in the first STEPS steps: 1/4, 1/16, 1/64, 1/256 of each chunk); "
                 "--verify checks against the same rounding and selection")
    ->capture_default_str();
  auto* on = cmd->add_flag("--compress-updates", a.updates_on,
                           "results travel back as 16-bit values too (bf16, fp16; the "
                           "default with those)");
  cmd
    ->add_flag("--no-compress-updates", a.updates_off,
               "only the gradients travel compressed (bf16, fp16)")
    ->excludes(on);
  cmd->add_option(
    "--straggler", a.straggler,
    "RANK:DELAY: that worker sleeps DELAY (us, ms, s) before each iteration; "
    "the run lasts until it has done --iters");
  cmd->add_option("--cluster-secret-file", a.secret_file,
                  "the cluster secret, if the coordinator demands one");
  cmd->add_option(
    "--rack", a.rack,
    "the workers' rack option (comm: NAME for all, or NAME,NAME,... one per "
    "worker; without --worker-racks the job goes on those racks' nodes and a "
    "hierarchical job places each worker at its rack's agg as it joins)");
  cmd
    ->add_option(
      "--transport", a.transport,
      "tcp, shm (shared memory with a node on this host), fabric (libfabric RMA "
      "with a node started with --fabric; one-node jobs) or auto (shm, else "
      "fabric, else tcp)")
    ->check(CLI::IsMember({"tcp", "shm", "fabric", "auto"}))
    ->capture_default_str();
}

} // namespace

int main(int argc, char** argv) {
  rw::tools::install_crash_report("rw-bench"); // a fault leaves a backtrace on stderr
  // Logs (the worker library's too, in the worker processes) go to stderr: stdout
  // carries the results the parent and the bench scripts parse.
  spdlog::set_default_logger(spdlog::stderr_color_mt("rw-bench"));
  CLI::App app{"rw-bench: RackWeave benchmarks", "rw-bench"};
  const std::string version = std::string("rw-bench ") + RW_VERSION;
  app.set_version_flag("--version", version);
  app.require_subcommand(1);
  comm_args a;
  auto* comm = app.add_subcommand(
    "comm",
    "W worker processes push_pull through a running rack-agg; prints step time "
    "(median, p90 over iterations; a step lasts until its slowest worker is done) "
    "and goodput.\n\n"
    "What the node needs: by default rw-bench creates its job through the cluster "
    "coordinator, found through --connect (any rack-agg's --listen address; a "
    "cluster with a secret needs --cluster-secret-file), and deletes it after. "
    "With --open-job the node at --connect must run with --open-jobs (no "
    "coordinator, no token). With --job NAME --token-file FILE it joins a job "
    "already made with rw.job_create (FILE holds its token), whose spec must "
    "match these options (--workers, --chunk-bytes, --consistency, "
    "--compression; sum as optimizer), and leaves it in place.");
  comm->set_version_flag("--version", version);
  add_common(comm, a);
  comm->add_flag("--json", a.json,
                 "one JSON line: workers, bytes, iters, consistency, median_ms, p90_ms, "
                 "goodput_gbps, verified, iterations, mean_wait_ms, max_staleness, "
                 "reduction, nodes, compression, compress_updates, wire_bytes (per step: "
                 "every worker's data frames sent and received, headers included)");
  comm->add_option("--timeout-s", a.timeout_s, "give up after this many seconds")
    ->capture_default_str();
  comm->add_option("--token-file", a.token_file,
                   "join the existing job --job NAME with the token in this file (made "
                   "with rw.job_create; chmod 600) instead of creating one");
  comm->add_flag(
    "--open-job", a.open_job,
    "let the workers create the job on the node at --connect, which must run "
    "with --open-jobs (one node, no coordinator)");
  comm->add_option(
    "--worker-racks", a.worker_racks,
    "RACK,RACK,...: each worker's rack, in rank order; the job is placed on "
    "those racks' nodes and each worker says hello to its rack's node");
  comm
    ->add_option("--reduction", a.reduction,
                 "how the job reduces across its nodes: auto, flat or hierarchical")
    ->check(CLI::IsMember({"auto", "flat", "hierarchical"}))
    ->capture_default_str();
  comm->add_option("--checkpoint-every", a.checkpoint_every,
                   "N: the job takes a checkpoint every N clocks into --checkpoint-dir "
                   "(through the coordinator: not with --open-job)");
  comm->add_option("--checkpoint-dir", a.checkpoint_dir,
                   "where --checkpoint-every writes (DIR/clock-NNNNNNNNNN)");
  comm
    ->add_option("--replicas", a.replicas,
                 "0 or 1: each chunk of a flat BSP job on several nodes also served by "
                 "the next node of the ring (default: the coordinator's, 1)")
    ->check(CLI::Range(0, 1));
  auto* worker = app.add_subcommand("comm-worker", "one worker of `comm` (internal)");
  worker->group(""); // hidden
  add_common(worker, a);
  worker->add_option("--rank", a.rank, "this worker's rank")->required();
  worker->add_option("--stop-file", a.stop_file,
                     "created by the pacing worker when done");
  worker->add_option("--token-file", a.token_file, "the job's token");
  worker->add_option("--parent", a.parent,
                     "rw-bench's PID: the worker ends when that process does");
  worker->add_option(
    "--rank-racks", a.rank_racks,
    "RACK,RACK,...: each rank's rack index, for --verify of a hierarchical "
    "job (racks summed first)");
  if (auto code = rw::tools::parse_command_line(app, argc, argv))
    return *code;

  std::string command = "rw-bench";
  for (int i = 1; i < argc; ++i)
    command += std::string(" ") + argv[i];
  try {
    if (*worker)
      return run_worker(a);
    return run_driver(a, command);
  } catch (const std::invalid_argument& e) { // options that do not go together
    std::cerr << "rw-bench: " << e.what() << "\n";
    return rw::tools::exit_usage;
  } catch (const rw::error& e) {
    std::cerr << "rw-bench: " << e.what() << "\n";
    return e.code() == rw::errc::unavailable || e.code() == rw::errc::timeout
             ? rw::tools::exit_unreachable
             : rw::tools::exit_failed;
  } catch (const std::exception& e) {
    std::cerr << "rw-bench: " << e.what() << "\n";
    return rw::tools::exit_failed;
  }
}
