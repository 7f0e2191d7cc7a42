// rw-bench: measures RackWeave as a user sees it.
//
//   rw-bench comm --connect 127.0.0.1:7700 --workers 4 --bytes 64MiB --iters 10 --verify
//   rw-bench comm --connect 127.0.0.1:7700 --workers 4 --worker-racks a,a,b,b --json
//
// creates a job through the cluster coordinator (found through the node at --connect;
// placed on the workers' racks, or on that node), starts W worker processes that
// push_pull deterministic pseudo-random gradients through it (optimizer `sum`, so the
// result is the exact all-reduce), reports the step time, and deletes the job. With
// --open-job the workers create the job themselves on a node started with
// --open-jobs, without the coordinator. With --verify every worker checks every element
// of every result bitwise against the rank-order sum it computes itself.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>
#include <fstream>
#include <thread>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/bench/cluster_job.hpp"
#include "apps/tools/subprocess.hpp"
#include "apps/tools/units.hpp"
#include "rackweave/worker.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct comm_args {
  std::string connect = rw::defaults::listen;
  uint32_t workers = 2;
  std::string bytes_text = "16MiB";
  uint32_t iters = 10;
  uint32_t warmup = 1;
  std::string chunk_text = "32KiB";
  std::string job;
  bool verify = false;
  bool json = false;
  std::string transport = "tcp";
  std::string consistency = "bsp";
  std::string straggler;  // "RANK:DELAY", e.g. 1:50ms
  uint32_t timeout_s = 600;
  bool open_job = false;  // join an --open-jobs node's job without the coordinator
  std::string worker_racks;   // comma-separated rack per rank
  std::string reduction = "auto";
  std::string secret_file;    // --cluster-secret-file
  uint32_t rank = 0;      // comm-worker only
  std::string stop_file;  // comm-worker only: the pacing worker creates it when done
  std::string token_file; // comm-worker only: the job's token
  std::string rank_racks; // comm-worker only: hierarchical sum order (rack per rank)
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    auto comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty())
      throw std::invalid_argument("--worker-racks takes RACK,RACK,... with no empty entry");
    out.push_back(item);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

std::string read_token(const std::string& path) {
  if (path.empty())
    return {};
  std::ifstream in{path};
  std::string token;
  if (!std::getline(in, token) || token.empty())
    throw std::invalid_argument("cannot read the job's token from " + path);
  return token;
}

struct straggler_spec {
  int rank = -1; // none
  std::chrono::microseconds delay{0};
};

// "1:50ms", "2:0.2s", "0:100us" (a bare number is milliseconds).
straggler_spec parse_straggler(const std::string& text, uint32_t workers) {
  straggler_spec out;
  if (text.empty())
    return out;
  auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument("--straggler takes RANK:DELAY, e.g. 1:50ms");
  auto rank = std::stoul(text.substr(0, colon));
  if (rank >= workers)
    throw std::invalid_argument(fmt::format("--straggler rank {} is not one of the {} workers",
                                            rank, workers));
  auto delay = text.substr(colon + 1);
  size_t used = 0;
  double value = std::stod(delay, &used);
  auto unit = delay.substr(used);
  double us = unit == "us" ? value : unit == "s" ? value * 1e6 : (unit.empty() || unit == "ms") ? value * 1e3 : -1;
  if (us < 0 || value < 0)
    throw std::invalid_argument("--straggler delay '" + delay + "' is not a duration (us, ms, s)");
  out.rank = static_cast<int>(rank);
  out.delay = std::chrono::microseconds(static_cast<int64_t>(us));
  return out;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's base gradient: reproducible, in [-1, 1).
void fill_base(std::vector<float>& v, uint32_t rank) {
  uint64_t state = splitmix(0x5257u + rank);
  for (auto& x : v) {
    state = splitmix(state);
    x = static_cast<float>(static_cast<int32_t>(state >> 32)) / 2147483648.0f;
  }
}

// Gradient of iteration `it` from the rank's base, into g[0..n).
void fill_grad(float* g, size_t n, const std::vector<float>& base, uint32_t it) {
  const float shift = static_cast<float>(it % 8) * 0.125f;
  for (size_t i = 0; i < n; ++i)
    g[i] = base[i] + shift;
}

// Which ranks are summed together first: one group of every rank (flat), or a group per
// rack, ranks in order, the groups in rack order (hierarchical: "0,0,1,1").
std::vector<std::vector<uint32_t>> rank_groups(const std::string& text, uint32_t workers) {
  std::vector<std::vector<uint32_t>> groups;
  if (text.empty()) {
    groups.emplace_back();
    for (uint32_t r = 0; r < workers; ++r)
      groups.back().push_back(r);
    return groups;
  }
  auto racks = split_list(text);
  if (racks.size() != workers)
    throw std::invalid_argument("--rank-racks needs one rack per worker");
  for (uint32_t r = 0; r < workers; ++r) {
    auto k = std::stoul(racks[r]);
    if (groups.size() <= k)
      groups.resize(k + 1);
    groups[k].push_back(r);
  }
  return groups;
}

// The exact result of iteration `it`: each group's gradients summed in rank order, then
// the groups' sums in order, as the node sums them.
void expected_sum(std::vector<float>& expect, std::vector<float>& tmp,
                  const std::vector<std::vector<float>>& bases, uint32_t it,
                  const std::vector<std::vector<uint32_t>>& groups) {
  auto n = expect.size();
  std::vector<float> part(n);
  tmp.resize(n);
  bool first_group = true;
  for (auto& g : groups) {
    if (g.empty())
      continue;
    fill_grad(part.data(), n, bases[g[0]], it);
    for (size_t j = 1; j < g.size(); ++j) {
      fill_grad(tmp.data(), n, bases[g[j]], it);
      for (size_t i = 0; i < n; ++i)
        part[i] += tmp[i];
    }
    if (first_group)
      expect = part;
    else
      for (size_t i = 0; i < n; ++i)
        expect[i] += part[i];
    first_group = false;
  }
}

// The benchmark's job, as the coordinator creates it (no tensors: workers declare them).
rw::job_spec bench_spec(const comm_args& a) {
  rw::job_spec spec;
  spec.name = a.job;
  spec.num_workers = a.workers;
  spec.chunk_bytes = static_cast<uint32_t>(rw::tools::parse_bytes(a.chunk_text));
  spec.optimizer.kind = rw::optimizer_kind::sum;
  spec.consistency = rw::parse_consistency(a.consistency);
  return spec;
}

int run_worker(const comm_args& a) {
  auto bytes = rw::tools::parse_bytes(a.bytes_text);
  auto elems = bytes / sizeof(float);
  rw::worker_options o;
  o.connect = a.connect;
  o.rank = a.rank;
  o.job = bench_spec(a);
  o.job.tensors = {{"gradient", elems, false}};
  o.transport = a.transport;
  o.token = read_token(a.token_file);
  auto straggler = parse_straggler(a.straggler, a.workers);
  // The pacing worker runs the iterations asked for; the others run until it is done.
  bool pacer = static_cast<int>(a.rank) == (straggler.rank >= 0 ? straggler.rank : 0);
  auto stop_seen = [&] { return !a.stop_file.empty() && access(a.stop_file.c_str(), F_OK) == 0; };
  uint32_t max_staleness = 0;
  try {
    rw::worker w{o};
    std::vector<std::vector<float>> bases(a.verify ? a.workers : 1,
                                          std::vector<float>(elems));
    for (uint32_t r = 0; r < bases.size(); ++r)
      fill_base(bases[r], a.verify ? r : a.rank);
    const auto& own = bases[a.verify ? a.rank : 0];
    // Over shared memory the gradient is computed in, and the result read from, the
    // worker's segment: zero copies, as a training loop using shm would do.
    std::vector<float> grad_buf(w.shared_gradient("gradient") ? 0 : elems);
    std::vector<float> out_buf(w.shared_result("gradient") ? 0 : elems);
    float* grad = w.shared_gradient("gradient") ? w.shared_gradient("gradient") : grad_buf.data();
    const float* out = w.shared_result("gradient") ? w.shared_result("gradient") : out_buf.data();
    float* out_arg = out_buf.empty() ? nullptr : out_buf.data(); // null: read in place
    std::vector<float> expect(a.verify ? elems : 0), tmp;
    auto groups = rank_groups(a.rank_racks, a.workers);
    std::vector<double> times;
    bool verified = a.verify;
    uint32_t done = 0;
    const uint32_t cap = pacer ? a.warmup + a.iters : 1000 * (a.warmup + a.iters) + 1000;
    for (uint32_t it = 0; it < cap && !(!pacer && stop_seen()); ++it) {
      fill_grad(grad, elems, own, it);
      std::fill(out_buf.begin(), out_buf.end(), std::nanf(""));
      if (static_cast<int>(a.rank) == straggler.rank)
        std::this_thread::sleep_for(straggler.delay);
      auto t0 = clock_type::now();
      try {
        w.push_pull("gradient", grad, out_arg).get();
      } catch (const rw::error&) {
        if (!pacer && stop_seen())
          break; // the pacing worker left while this one waited for it: the run is over
        throw;
      }
      auto t1 = clock_type::now();
      ++done;
      max_staleness = std::max(max_staleness, w.last_staleness("gradient"));
      if (it >= a.warmup)
        times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (!a.verify)
        continue;
      expected_sum(expect, tmp, bases, it, groups);
      if (std::memcmp(expect.data(), out, bytes) != 0) {
        for (size_t i = 0; i < elems; ++i)
          if (std::memcmp(&expect[i], &out[i], sizeof(float)) != 0) {
            std::cerr << fmt::format("rank {}: iteration {}: element {} is {:.9g}, the "
                                     "rank-order sum is {:.9g}\n",
                                     a.rank, it, i, out[i], expect[i]);
            break;
          }
        verified = false;
      }
    }
    if (pacer && !a.stop_file.empty())
      std::ofstream{a.stop_file} << "done\n";
    w.close();
    std::cout << "RESULT " << (verified ? 1 : 0) << ' ' << done << ' ' << max_staleness;
    for (auto t : times)
      std::cout << ' ' << fmt::format("{:.4f}", t);
    std::cout << std::endl;
    return a.verify && !verified ? 3 : 0;
  } catch (const rw::error& e) {
    std::cerr << fmt::format("rank {}: {} ({})\n", a.rank, e.what(), rw::to_string(e.code()));
    return 2;
  }
}

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
  auto model = rw::parse_consistency(a.consistency); // says what is wrong
  parse_straggler(a.straggler, a.workers);
  if (a.verify && model.model != rw::consistency_spec::bsp)
    throw std::invalid_argument("--verify checks the exact BSP result: it needs --consistency bsp");
  a.stop_file = fmt::format("/tmp/rw-bench-{}-{}.stop", getpid(),
                            clock_type::now().time_since_epoch().count());
  if (a.job.empty())
    a.job = fmt::format("bench-{}-{}", getpid(),
                        clock_type::now().time_since_epoch().count() % 1000000);
  auto racks = split_list(a.worker_racks);
  if (!racks.empty() && racks.size() != a.workers)
    throw std::invalid_argument(fmt::format("--worker-racks names {} racks for {} workers: "
                                            "give one per worker",
                                            racks.size(), a.workers));
  if (a.open_job && (!racks.empty() || a.reduction != "auto"))
    throw std::invalid_argument("--open-job runs on one node: it takes no --worker-racks or "
                                "--reduction");
  std::unique_ptr<rw::bench::cluster_job> job;
  if (!a.open_job) {
    rw::bench::cluster_job_request req;
    req.connect = a.connect;
    req.secret_file = a.secret_file;
    req.spec = bench_spec(a);
    req.worker_racks = racks;
    req.reduction = a.reduction;
    job = std::make_unique<rw::bench::cluster_job>(req);
  }
  const std::vector<std::string> one_node{"(open job)"};
  const auto& nodes = job ? job->nodes() : one_node;
  const std::string reduction = job ? job->reduction() : "single-node";
  auto self = rw::tools::self_dir() + "/rw-bench";
  std::vector<rw::tools::subprocess> kids;
  for (uint32_t r = 0; r < a.workers; ++r) {
    std::vector<std::string> argv{self,          "comm-worker",
                                  "--connect",   job ? job->connect_of(r) : a.connect,
                                  "--rank",      std::to_string(r),
                                  "--workers",   std::to_string(a.workers),
                                  "--bytes",     a.bytes_text,
                                  "--iters",     std::to_string(a.iters),
                                  "--warmup",    std::to_string(a.warmup),
                                  "--chunk-bytes", a.chunk_text,
                                  "--transport", a.transport,
                                  "--consistency", a.consistency,
                                  "--stop-file", a.stop_file,
                                  "--job",       a.job};
    if (!a.straggler.empty()) {
      argv.push_back("--straggler");
      argv.push_back(a.straggler);
    }
    if (a.verify)
      argv.push_back("--verify");
    if (job) {
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
    std::istringstream in{out};
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
  std::vector<std::string> waits;
  for (auto m : mean_wait)
    waits.push_back(fmt::format("{:.3f}", m));
  if (a.json) {
    std::cout << fmt::format("{{\"workers\":{},\"bytes\":{},\"iters\":{},\"consistency\":\"{}\","
                             "\"median_ms\":{:.3f},\"p90_ms\":{:.3f},\"goodput_gbps\":{:.3f},"
                             "\"verified\":{},\"iterations\":[{}],\"mean_wait_ms\":[{}],"
                             "\"max_staleness\":{},\"reduction\":\"{}\",\"nodes\":{}}}\n",
                             a.workers, bytes, a.iters, rw::to_string(model), median, p90, gbps,
                             verified ? "true" : "false", fmt::join(iterations, ","),
                             fmt::join(waits, ","), max_staleness, reduction, nodes.size());
  } else {
    std::cout << fmt::format("rw-bench comm: {} workers x {} (push_pull, optimizer sum, {}), "
                             "{} iterations after {} warm-up\n",
                             a.workers, rw::tools::format_bytes(bytes), a.transport, a.iters,
                             a.warmup);
    std::cout << fmt::format("  median {:.3f} ms   p90 {:.3f} ms   goodput {:.3f} Gbit/s "
                             "(2 x workers x bytes per step)   verified: {}\n",
                             median, p90, gbps,
                             a.verify ? (verified ? "yes" : "NO") : "not checked");
    std::cout << fmt::format("  consistency {}: iterations per worker [{}], mean wait ms [{}], "
                             "largest staleness served {}\n",
                             rw::to_string(model), fmt::join(iterations, ", "),
                             fmt::join(waits, ", "), max_staleness);
    std::cout << fmt::format("  job on {} node(s) [{}], reduction {}\n", nodes.size(),
                             fmt::join(nodes, ", "), reduction);
    std::cout << "  command: " << command << "\n";
  }
  return a.verify && !verified ? 3 : 0;
}

void add_common(CLI::App* cmd, comm_args& a) {
  cmd->add_option("--connect", a.connect, "HOST:PORT of the rack-agg node")
    ->capture_default_str();
  cmd->add_option("--workers", a.workers, "worker processes (ranks)")->capture_default_str();
  cmd->add_option("--bytes", a.bytes_text, "gradient size per worker (e.g. 64MiB)")
    ->capture_default_str();
  cmd->add_option("--iters", a.iters, "timed iterations")->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "untimed iterations first")->capture_default_str();
  cmd->add_option("--chunk-bytes", a.chunk_text, "chunk size of the job")
    ->capture_default_str();
  cmd->add_option("--job", a.job, "job name (default: a fresh one per run)");
  cmd->add_flag("--verify", a.verify, "check every element of every result exactly");
  cmd->add_option("--consistency", a.consistency, "bsp, ssp:S (bounded staleness S) or async")
    ->capture_default_str();
  cmd->add_option("--straggler", a.straggler,
                  "RANK:DELAY: that worker sleeps DELAY (us, ms, s) before each iteration; "
                  "the run lasts until it has done --iters");
  cmd->add_option("--cluster-secret-file", a.secret_file,
                  "the cluster secret, if the coordinator demands one");
  cmd->add_option("--transport", a.transport,
                  "tcp, shm (shared memory with a node on this host) or auto")
    ->check(CLI::IsMember({"tcp", "shm", "auto"}))
    ->capture_default_str();
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"rw-bench: RackWeave benchmarks", "rw-bench"};
  app.require_subcommand(1);
  comm_args a;
  auto* comm = app.add_subcommand(
    "comm", "W worker processes push_pull through a running rack-agg; prints step time "
            "(median, p90 over iterations; a step lasts until its slowest worker is done) "
            "and goodput");
  add_common(comm, a);
  comm->add_flag("--json", a.json,
                 "one JSON line: workers, bytes, iters, consistency, median_ms, p90_ms, "
                 "goodput_gbps, verified, iterations, mean_wait_ms, max_staleness, "
                 "reduction, nodes");
  comm->add_option("--timeout-s", a.timeout_s, "give up after this many seconds")
    ->capture_default_str();
  comm->add_flag("--open-job", a.open_job,
                 "let the workers create the job on the node at --connect, which must run "
                 "with --open-jobs (one node, no coordinator)");
  comm->add_option("--worker-racks", a.worker_racks,
                   "RACK,RACK,...: each worker's rack, in rank order; the job is placed on "
                   "those racks' nodes and each worker says hello to its rack's node");
  comm->add_option("--reduction", a.reduction,
                   "how the job reduces across its nodes: auto, flat or hierarchical")
    ->check(CLI::IsMember({"auto", "flat", "hierarchical"}))
    ->capture_default_str();
  auto* worker = app.add_subcommand("comm-worker", "one worker of `comm` (internal)");
  worker->group(""); // hidden
  add_common(worker, a);
  worker->add_option("--rank", a.rank, "this worker's rank")->required();
  worker->add_option("--stop-file", a.stop_file, "created by the pacing worker when done");
  worker->add_option("--token-file", a.token_file, "the job's token");
  worker->add_option("--rank-racks", a.rank_racks,
                     "RACK,RACK,...: each rank's rack index, for --verify of a hierarchical "
                     "job (racks summed first)");
  CLI11_PARSE(app, argc, argv);

  std::string command = "rw-bench";
  for (int i = 1; i < argc; ++i)
    command += std::string(" ") + argv[i];
  try {
    if (*worker)
      return run_worker(a);
    return run_driver(a, command);
  } catch (const std::exception& e) {
    std::cerr << "rw-bench: " << e.what() << "\n";
    return 2;
  }
}
