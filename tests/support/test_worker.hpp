#pragma once
// The fixture job's worker as a process (tests/tools/test_worker.cpp, rw-test-worker):
// the one builder of its command line, the one type of a running worker, and the checks
// of how it ended. Every test that runs workers as processes starts them here.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/tools/subprocess.hpp"
#include "tests/support/node_process.hpp"

namespace rw::testing {

/// What an rw-test-worker runs. The defaults are the worker's own, so a field left
/// alone adds nothing to its command line.
struct worker_args {
  std::string connect; // HOST:PORT of a node
  std::string job;
  uint32_t rank = 0;
  uint32_t workers = 2;
  std::string token;              // the job's ("": none)
  std::string optimizer;          // "": sum
  uint32_t steps = 0;             // 0: the worker's 3
  uint32_t step_delay_ms = 0;     // between steps
  bool split = false;             // push, then pull, instead of push_pull
  std::string transport;          // tcp, shm, fabric; "": auto
  bool verify = true;             // check the result bitwise against the reference
  uint32_t hold_ms = 0;           // stay in the job this long after the last step
  std::string rank_racks;         // a hierarchical job: the reference sums racks first
  std::string rack;               // the worker's rack option
  std::vector<std::string> extra; // anything else, last

  /// Rank `rank` of `job` at `connect` with the job's token ("": none); the rest the
  /// worker's defaults, set field by field after.
  static worker_args of(std::string connect, std::string job, uint32_t rank,
                        std::string token = {}) {
    worker_args a;
    a.connect = std::move(connect);
    a.job = std::move(job);
    a.rank = rank;
    a.token = std::move(token);
    return a;
  }

  /// The command line, writing its parameters to `out_path`.
  std::vector<std::string> argv(const std::string& out_path) const {
    std::vector<std::string> a{RW_TEST_WORKER_PATH,
                               "--connect",
                               connect,
                               "--job",
                               job,
                               "--rank",
                               std::to_string(rank),
                               "--workers",
                               std::to_string(workers),
                               "--out",
                               out_path};
    auto option = [&a](const char* name, const std::string& value) {
      if (!value.empty()) {
        a.push_back(name);
        a.push_back(value);
      }
    };
    auto number = [&option](const char* name, uint32_t value) {
      if (value != 0)
        option(name, std::to_string(value));
    };
    option("--token", token);
    option("--optimizer", optimizer);
    number("--steps", steps);
    number("--step-delay-ms", step_delay_ms);
    option("--transport", transport);
    number("--hold-ms", hold_ms);
    option("--rank-racks", rank_racks);
    option("--rack", rack);
    if (split)
      a.push_back("--split");
    if (verify)
      a.push_back("--verify");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

/// A running rw-test-worker (stdout captured, stderr to `err_path`); its files are
/// removed when it is destroyed, and its process stopped by PID (tools::subprocess).
struct worker_process {
  std::unique_ptr<tools::subprocess> proc;
  std::string err_path = temp_path("worker.err");
  std::string out_path = temp_path("worker.bin");
  ~worker_process() {
    proc.reset();
    std::remove(err_path.c_str());
    std::remove(out_path.c_str());
  }
};

inline std::unique_ptr<worker_process> start_worker(const worker_args& args) {
  auto w = std::make_unique<worker_process>();
  w->proc = std::make_unique<tools::subprocess>(args.argv(w->out_path), true,
                                                w->err_path);
  return w;
}

/// Waits until `deadline` for `w` to end: its exit code, and its stdout then stderr.
inline std::pair<std::optional<int>, std::string> finish(
  worker_process& w, std::chrono::steady_clock::time_point deadline) {
  auto out = w.proc->read_all(deadline);
  auto code = w.proc->wait_until(deadline);
  return {code, out + read_file(w.err_path)};
}

/// The same within `seconds`.
inline std::pair<std::optional<int>, std::string> finish(worker_process& w,
                                                         int seconds = 60) {
  return finish(w, std::chrono::steady_clock::now() + std::chrono::seconds(seconds));
}

/// Waits for `w` to end by `deadline` and checks that it exited 0 with its parameters
/// bitwise the reference; `what` (and `context`, read then) name it in a failure.
inline void check_verified(worker_process& w, const std::string& what,
                           std::chrono::steady_clock::time_point deadline,
                           const std::string& context = {}) {
  auto [code, out] = finish(w, deadline);
  INFO(what << ": " << out);
  INFO(context);
  CHECK(code == std::optional<int>{0});
  CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
}

/// Waits (up to `seconds` each) for every worker of `ws` to end, and checks that each
/// exited 0 with its parameters bitwise the reference and said each line of `also`.
inline void check_all_verified(std::vector<std::unique_ptr<worker_process>>& ws,
                               const std::vector<std::string>& also = {},
                               int seconds = 60) {
  for (auto& w : ws) {
    auto [code, out] = finish(*w, seconds);
    INFO(out);
    CHECK(code == std::optional<int>{0});
    CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
    for (auto& line : also)
      CHECK_THAT(out, Catch::Contains(line));
  }
}

} // namespace rw::testing
