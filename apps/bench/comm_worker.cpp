#include "apps/bench/comm_worker.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <thread>

#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "apps/bench/comm_reference.hpp"
#include "apps/tools/units.hpp"
#include "rackweave/worker.hpp"

namespace rw::bench {

namespace {

using clock_type = std::chrono::steady_clock;

std::string read_token(const std::string& path) {
  if (path.empty())
    return {};
  std::ifstream in{path};
  std::string token;
  if (!std::getline(in, token) || token.empty())
    throw std::invalid_argument("cannot read the job's token from " + path);
  return token;
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
std::vector<std::vector<uint32_t>> rank_groups(const std::string& text,
                                               uint32_t workers) {
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

// The exact result of iteration `it`: each rank's gradient as the node receives it
// (compressed as the job says), each group's summed in rank order, then the groups' sums
// in order, as the node sums them; then as a worker reads it. Call it once per
// iteration, in order (top-k residuals advance).
void expected_sum(std::vector<float>& expect, std::vector<float>& tmp,
                  const std::vector<std::vector<float>>& bases, uint32_t it,
                  const std::vector<std::vector<uint32_t>>& groups, comm_reference& ref) {
  auto n = expect.size();
  std::vector<float> part(n);
  tmp.resize(n);
  bool first_group = true;
  for (auto& g : groups) {
    if (g.empty())
      continue;
    fill_grad(part.data(), n, bases[g[0]], it);
    ref.as_received(g[0], it, part.data());
    for (size_t j = 1; j < g.size(); ++j) {
      fill_grad(tmp.data(), n, bases[g[j]], it);
      ref.as_received(g[j], it, tmp.data());
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
  ref.as_answered(expect.data());
}

} // namespace

int run_worker(const comm_args& a) {
  // A worker ends with the rw-bench that started it, also when that one is stopped by
  // its PID (SIGTERM, a timeout): it started this process from its main thread, which
  // lives as long as it does, so the parent-death signal fires only then. One that is
  // gone already (before the signal was asked for) ends at once.
  if (a.parent > 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != static_cast<pid_t>(a.parent)) {
      std::cerr << "comm-worker: rw-bench (pid " << a.parent << ") has ended\n";
      return 1;
    }
  }
  auto bytes = rw::tools::parse_bytes(a.bytes_text);
  auto elems = bytes / sizeof(float);
  rw::worker_options o;
  o.connect = a.connect;
  o.rank = a.rank;
  o.job = bench_spec(a);
  o.job.tensors = bench_tensors(elems, a.layers);
  const auto layers = o.job.tensors; // end to end in the gradient
  if (a.barrier) // its chunk comes back once every worker has pushed it
    o.job.tensors.push_back({"barrier", 1, false});
  o.transport = a.transport;
  o.token = read_token(a.token_file);
  o.rack = a.rack;
  if (!a.trace.empty())
    o.trace = fmt::format("{}.rank{}.json", a.trace, a.rank);
  if (!a.push_window_text.empty())
    o.push_window_bytes = rw::tools::parse_bytes(a.push_window_text);
  auto straggler = parse_straggler(a.straggler, a.workers);
  // The pacing worker runs the iterations asked for; the others run until it is done.
  bool pacer = static_cast<int>(a.rank) == (straggler.rank >= 0 ? straggler.rank : 0);
  auto stop_seen = [&] {
    return !a.stop_file.empty() && access(a.stop_file.c_str(), F_OK) == 0;
  };
  uint32_t max_staleness = 0;
  try {
    // The buffers the worker's calls use in place are declared before it: when one call
    // of several in flight fails, the others go on writing into theirs until the worker
    // is gone (worker.hpp), which happens first as the scope unwinds.
    std::vector<float> grad_buf, out_buf;
    rw::worker w{o};
    std::vector<std::vector<float>> bases(a.verify ? a.workers : 1,
                                          std::vector<float>(elems));
    for (uint32_t r = 0; r < bases.size(); ++r)
      fill_base(bases[r], a.verify ? r : a.rank);
    const auto& own = bases[a.verify ? a.rank : 0];
    // Over shared memory the gradient is computed in, and the result read from, the
    // worker's segment: zero copies, as a training loop using shm would do.
    const auto& first = layers.front().name; // "gradient" unless --layers (TCP only)
    // With compress_updates a worker reads the results rounded, as the network carries
    // them: over shared memory that is a copy (the node's, in place, stay float32).
    const bool in_place = w.shared_result(first) && !o.job.compression.updates;
    grad_buf.resize(w.shared_gradient(first) ? 0 : elems);
    out_buf.resize(in_place ? 0 : elems);
    float* grad = w.shared_gradient(first) ? w.shared_gradient(first) : grad_buf.data();
    const float* out = in_place ? w.shared_result(first) : out_buf.data();
    float* out_arg = out_buf.empty() ? nullptr : out_buf.data(); // null: read in place
    std::vector<float> expect(a.verify ? elems : 0), tmp;
    auto groups = rank_groups(a.rank_racks, a.workers);
    auto ref_spec = o.job;
    ref_spec.tensors = layers;
    comm_reference ref{ref_spec, a.verify ? a.workers : 0}; // residuals only to verify
    // Wire bytes when timing began, and after the last iteration done (a worker that is
    // not pacing may push once more before it sees the run is over: not counted).
    uint64_t sent_before = 0, received_before = 0, sent_after = 0, received_after = 0;
    std::vector<double> times;
    bool verified = a.verify;
    uint32_t done = 0;
    const uint32_t cap = pacer ? a.warmup + a.iters : 1000 * (a.warmup + a.iters) + 1000;
    for (uint32_t it = 0; it < cap && !(!pacer && stop_seen()); ++it) {
      fill_grad(grad, elems, own, it);
      std::fill(out_buf.begin(), out_buf.end(), std::nanf(""));
      if (static_cast<int>(a.rank) == straggler.rank)
        std::this_thread::sleep_for(straggler.delay);
      if (it == a.warmup) {
        sent_before = w.wire_bytes_sent();
        received_before = w.wire_bytes_received();
      }
      auto t0 = clock_type::now();
      try {
        if (a.barrier) {
          float ready = 1, all_ready = 0;
          w.push_pull("barrier", &ready, &all_ready).get();
          t0 = clock_type::now();
        }
        if (a.layers == 0) {
          w.push_pull("gradient", grad, out_arg).get();
        } else { // every layer at once, as a framework hands over its buckets
          std::vector<std::future<void>> all;
          uint64_t at = 0;
          for (auto& t : layers) {
            all.push_back(w.push_pull(t.name, grad + at, out_arg + at));
            at += t.elements;
          }
          for (auto& f : all)
            f.get();
        }
      } catch (const rw::error&) {
        if (!pacer && stop_seen())
          break; // the pacing worker left while this one waited for it: the run is over
        throw;
      }
      auto t1 = clock_type::now();
      ++done;
      sent_after = w.wire_bytes_sent();
      received_after = w.wire_bytes_received();
      max_staleness = std::max(max_staleness, w.last_staleness(layers.front().name));
      if (it >= a.warmup)
        times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (!a.verify)
        continue;
      expected_sum(expect, tmp, bases, it, groups, ref);
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
    // Data bytes on the network per timed iteration, sent and received (its own line:
    // readers of the RESULT line stay as they are).
    const double timed = static_cast<double>(std::max<size_t>(times.size(), 1));
    std::cout << fmt::format(
      "WIRE {:.0f} {:.0f}\n", static_cast<double>(sent_after - sent_before) / timed,
      static_cast<double>(received_after - received_before) / timed);
    w.close();
    std::cout << "RESULT " << (verified ? 1 : 0) << ' ' << done << ' ' << max_staleness;
    for (auto t : times)
      std::cout << ' ' << fmt::format("{:.4f}", t);
    std::cout << std::endl;
    return a.verify && !verified ? 3 : 0;
  } catch (const rw::error& e) {
    std::cerr << fmt::format("rank {}: {} ({})\n", a.rank, e.what(),
                             rw::to_string(e.code()));
    return 2;
  }
}

} // namespace rw::bench
