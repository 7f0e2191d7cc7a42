// rw-test-worker: one worker of the integration tests' fixture job. Joins (proving
// --token if given), initialises (rank 0), runs --steps push_pull steps on every
// tensor at once and writes the final parameters of every tensor, in order, as raw
// float32 to --out. With --verify it also checks them bitwise against the
// single-process reference (exit 5 if they differ); --hold-ms keeps it in the job
// that long after its last step (exit 7 if an operator stops the job meanwhile);
// --step-delay-ms paces the steps.
// --start-clock K joins a job restored from a checkpoint at clock K: no init, every
// tensor is read at version K and the steps run from K to --steps (the same gradients
// as an uninterrupted run's). --pause-at K --resume-file F: after K steps, wait until F
// exists (at most --pause-limit-ms, else exit 6), so a test can checkpoint at clock K.
// Without --start-clock the worker goes on from where the node says its rank is (a
// restarted worker: the first step it had not pushed everywhere), and says so.
// --extra-elements N adds a fourth tensor, "delta", of N floats (a job of benchmark
// size: bench/failover.sh); every worker of the job must give the same N.
// --crash-at K: at step K, sends the first tensor's push and dies (exit 9, no bye), as a
// killed process would, mid-step.
// --clock-file F: appends "CLOCK UNIX_MS" to F as each step ends (the clock it reached,
// the system clock in ms): bench/failover.sh times recovery from these.
// --trace F: the worker's step timeline (worker_options::trace).

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "rackweave/worker.hpp"
#include "tests/tools/fixture_job.hpp"
#include "tests/tools/fixture_reference.hpp"

int main(int argc, char** argv) {
  std::string connect, job, optimizer = "sum", out, transport = "auto", token, rack;
  uint32_t rank = 0, workers = 1, steps = 3, hold_ms = 0, step_delay_ms = 0;
  uint32_t start_clock = 0, pause_at = 0, pause_limit_ms = 60'000;
  int64_t crash_at = -1;
  uint64_t extra_elements = 0;
  std::string resume_file;
  std::string clock_file;
  bool verify = false;
  std::vector<uint32_t> rank_racks;
  CLI::App app{"rw-test-worker: one worker of the test fixture job"};
  app.add_option("--connect", connect)->required();
  app.add_option("--job", job)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--workers", workers)->required();
  app.add_option("--optimizer", optimizer);
  app.add_option("--steps", steps);
  app.add_option("--out", out)->required();
  app.add_option("--transport", transport);
  app.add_option("--token", token, "the job's token (from rw.job_create)");
  app.add_flag("--verify", verify,
               "check the result against the single-process reference");
  app.add_option("--hold-ms", hold_ms, "stay in the job this long after the last step");
  app.add_option(
    "--step-delay-ms", step_delay_ms,
    "sleep this long before each step (a run that is mid-training for a while)");
  app.add_option("--rack", rack, "the worker's rack option");
  app.add_option("--start-clock", start_clock, "the clock a restored job goes on from");
  app.add_option("--extra-elements", extra_elements,
                 "add a tensor 'delta' of this many floats");
  uint32_t chunk_bytes = 0;
  app.add_option("--chunk-bytes", chunk_bytes,
                 "the job's chunk size (default: the fixture's)");
  app.add_option("--crash-at", crash_at,
                 "at this step push one tensor, then die (exit 9)");
  bool split = false;
  app.add_flag("--split", split,
               "push, then pull, rather than push_pull (pushes are acked)");
  app.add_option("--pause-at", pause_at, "after this many steps wait for --resume-file");
  app.add_option("--resume-file", resume_file, "go on once this file exists");
  app.add_option("--pause-limit-ms", pause_limit_ms, "longest pause (then exit 6)");
  app.add_option("--clock-file", clock_file,
                 "append 'CLOCK UNIX_MS' here as each step ends");
  std::string trace;
  app.add_option("--trace", trace,
                 "write this worker's step timeline here (Chrome trace-event JSON)");
  app
    .add_option("--rank-racks", rank_racks,
                "each rank's rack, in rank order (a hierarchical job's sum order)")
    ->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  auto kind = rw::parse_optimizer_kind(optimizer);
  if (!kind) {
    std::cerr << "unknown optimizer " << optimizer << "\n";
    return 2;
  }
  rw::worker_options o;
  o.connect = connect;
  o.rank = rank;
  o.job = rw::testing::fixture_job(job, workers, *kind);
  if (extra_elements > 0)
    o.job.tensors.push_back({"delta", extra_elements, false});
  if (chunk_bytes > 0)
    o.job.chunk_bytes = chunk_bytes;
  o.request_timeout = std::chrono::seconds(30);
  o.transport = transport;
  o.token = token;
  o.rack = rack;
  o.start_clock = start_clock;
  o.trace = trace;
  try {
    // The buffers outlive the worker: a call still in flight when another call's
    // failure ends the run goes on writing into its buffer until the worker is gone
    // (worker.hpp), so they are declared first and destroyed last.
    std::vector<std::vector<float>> params(o.job.tensors.size());
    std::vector<std::vector<float>> grads;
    rw::worker w{o};
    if (transport != "auto" && transport != w.transport()) {
      std::cerr << "asked for " << transport << ", got " << w.transport() << "\n";
      return 4;
    }
    auto& tensors = o.job.tensors;
    // Restored, or joined again: the node said where this rank goes on from.
    auto start = static_cast<uint32_t>(w.clock(tensors[0].name));
    if (start > 0 && start_clock == 0)
      std::cout << "rank " << rank << ": resumes at clock " << start << std::endl;
    std::vector<std::future<void>> resumed;
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      params[t].resize(tensors[t].elements);
      if (start > 0) { // that version (or a newer one, where the step completed)
        resumed.push_back(w.pull(tensors[t].name, params[t].data(), start));
        continue;
      }
      if (!tensors[t].has_init)
        continue;
      if (rank == 0) {
        auto init = rw::testing::fixture_init(t, tensors[t].elements);
        w.init(tensors[t].name, init.data()).get();
      }
      // Every rank reads version 0; non-zero ranks wait for rank 0's init.
      w.pull(tensors[t].name, params[t].data(), 0).get();
    }
    for (auto& f : resumed) // all in flight at once, as a restarted process would read
      f.get();
    // The steady state: the steps after the first two (joins, inits and first pulls
    // settle there), timed for bench/failover.sh.
    uint32_t timed_from = std::min(start + 2, steps);
    auto timed_start = std::chrono::steady_clock::now();
    for (uint32_t s = start; s < steps; ++s) {
      if (s == timed_from)
        timed_start = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms));
      if (!resume_file.empty() && s == pause_at) {
        auto limit = std::chrono::steady_clock::now()
                     + std::chrono::milliseconds(pause_limit_ms);
        while (!std::ifstream{resume_file}.good()) {
          if (std::chrono::steady_clock::now() > limit) {
            std::cerr << "rank " << rank << ": " << resume_file << " did not appear\n";
            return 6;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      grads.clear();
      std::vector<std::future<void>> pending;
      for (uint32_t t = 0; t < tensors.size(); ++t)
        grads.push_back(rw::testing::fixture_gradient(rank, s, t, tensors[t].elements));
      if (crash_at >= 0 && s == static_cast<uint32_t>(crash_at)) {
        auto sent = w.push(tensors[0].name, grads[0].data());
        sent.wait_for(std::chrono::seconds(5)); // counted: the step is half done here
        std::cout << "rank " << rank << ": crashing at step " << s << std::endl;
        std::_Exit(9);
      }
      if (split) { // acked pushes first, then the new version
        for (uint32_t t = 0; t < tensors.size(); ++t)
          pending.push_back(w.push(tensors[t].name, grads[t].data()));
        for (auto& f : pending)
          f.get();
        pending.clear();
        for (uint32_t t = 0; t < tensors.size(); ++t)
          pending.push_back(w.pull(tensors[t].name, params[t].data(), s + 1));
      } else {
        for (uint32_t t = 0; t < tensors.size(); ++t)
          pending.push_back(
            w.push_pull(tensors[t].name, grads[t].data(), params[t].data()));
      }
      for (auto& f : pending)
        f.get();
      if (!clock_file.empty()) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
        std::ofstream{clock_file, std::ios::app} << s + 1 << ' ' << ms << '\n';
      }
    }
    if (steps > timed_from) {
      std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now()
                                                       - timed_start;
      std::cout << "rank " << rank << ": steps " << timed_from << ".." << steps
                << " took " << took.count() / (steps - timed_from) << " ms per step"
                << std::endl;
    }
    std::ofstream file{out, std::ios::binary};
    for (auto& p : params)
      file.write(reinterpret_cast<const char*>(p.data()),
                 static_cast<std::streamsize>(p.size() * sizeof(float)));
    if (!file.good())
      return 3;
    if (verify) {
      for (uint32_t t = 0; t < tensors.size(); ++t) {
        auto ref = rw::testing::fixture_reference(o.job, t, workers, steps, rank_racks);
        if (std::memcmp(ref.data(), params[t].data(), ref.size() * sizeof(float)) != 0) {
          std::cerr << "rank " << rank << ": tensor " << tensors[t].name
                    << " differs from the single-process reference\n";
          return 5;
        }
      }
      std::cout << "rank " << rank << ": verified, bitwise the reference" << std::endl;
    }
    // Holding: stay live in the job, reading a tensor now and then, until the hold
    // ends or the job does (an operator's stop arrives as errc::stopped).
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms);
    while (std::chrono::steady_clock::now() < until) {
      w.pull(tensors[0].name, params[0].data(), 0).get();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    w.close();
    return 0;
  } catch (const rw::error& e) {
    std::cerr << "rank " << rank << ": " << e.what() << " (" << rw::to_string(e.code())
              << ")\n";
    return e.code() == rw::errc::stopped ? 7 : 2;
  }
}
