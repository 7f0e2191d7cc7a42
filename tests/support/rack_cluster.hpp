#pragma once
// A cluster of racks on 127.0.0.1 for one test (a --role coordinator and one rack-agg
// per rack, racks by --rack), and the fixture job's workers run against it (each a
// rw-test-worker process, checked bitwise against the single-process reference). Every
// process is stopped by PID at the end.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/test_worker.hpp"

namespace rw::testing {

// A --role coordinator and one rack-agg node per entry of `racks` (named n0, n1, ...).
struct rack_cluster {
  /// `node_args`: more options for every rack-agg node; `per_node[i]`: for node i only.
  explicit rack_cluster(const std::vector<std::string>& racks,
                        const std::vector<std::string>& node_args = {},
                        const std::vector<std::vector<std::string>>& per_node = {})
    : coordinator({"--name", "coord"}, {"coordinator", false, {}}) {
    for (size_t i = 0; i < racks.size(); ++i) {
      std::vector<std::string> args{"--name", "n" + std::to_string(i), "--rack",
                                    racks[i]};
      args.insert(args.end(), node_args.begin(), node_args.end());
      if (i < per_node.size())
        args.insert(args.end(), per_node[i].begin(), per_node[i].end());
      nodes.push_back(std::make_unique<node_process>(
        args, node_role{"rack-agg", false, coordinator.address()}));
    }
    auto live = std::to_string(racks.size()) + " node(s) live";
    if (!coordinator.wait_for_log(live, std::chrono::seconds(15)))
      throw std::runtime_error("the nodes did not join; the coordinator's log:\n"
                               + coordinator.log());
  }

  shell_run shell(const std::string& code) {
    return run_shell({"--connect", coordinator.address(), "-c", code});
  }
  /// Whether every rank of `job` reached `clock` within 60 s.
  bool wait_clock(const std::string& job, int clock) {
    return shell("rw.wait('" + job + "', " + std::to_string(clock)
                 + ", {timeout = 60}); print('ok')")
             .out
           == "ok\n";
  }

  // Creates a job with the fixture's settings; returns its token ("" and the error in
  // `err` if refused).
  std::string create(const std::string& name, uint32_t workers,
                     const std::string& optimizer, const std::string& where,
                     std::string* err = nullptr) {
    auto r = shell("local j = rw.job_create{name = '" + name
                   + "', workers = " + std::to_string(workers) + ", optimizer = '"
                   + optimizer + "', lr = 0.05, momentum = 0.9, weight_decay = "
                   + (optimizer == "sgd" ? "0.01" : "0") + ", chunk_bytes = '4KiB', "
                   + where + "}; print(j.token)");
    if (err != nullptr)
      *err = r.err;
    if (r.code != 0)
      return {};
    return r.out.substr(0, r.out.find('\n'));
  }

  node_process coordinator;
  std::vector<std::unique_ptr<node_process>> nodes;
};

/// Starts rank `rank` of `job` (two workers, over TCP, checked against the
/// single-process reference) at `connect` with the job's token; `args` adds the rest
/// (--optimizer, --steps, --step-delay-ms, ...).
inline std::unique_ptr<worker_process> start_verified(
  const std::string& connect, const std::string& job, uint32_t rank,
  const std::string& token, const std::vector<std::string>& args) {
  auto a = worker_args::of(connect, job, rank, token);
  a.transport = "tcp";
  a.extra = args;
  return start_worker(a);
}

/// A verified worker of two paced at 40 ms a step, so a fault lands while it runs:
/// `optimizer`, `steps`; with `split` it pushes, then pulls; `extra` arguments after.
inline std::unique_ptr<worker_process> start_paced(const std::string& connect,
                                                   const std::string& job, uint32_t rank,
                                                   const std::string& token,
                                                   const std::string& optimizer,
                                                   uint32_t steps, bool split,
                                                   std::vector<std::string> extra = {}) {
  auto a = worker_args::of(connect, job, rank, token);
  a.transport = "tcp";
  a.optimizer = optimizer;
  a.steps = steps;
  a.step_delay_ms = 40;
  a.split = split;
  a.extra = std::move(extra);
  return start_worker(a);
}

// Runs the job's workers, each connecting to the node given for its rank (with the
// rack option given for it, if any); every one must end 0 with a result bitwise the
// single-process reference. Returns what each printed on stderr.
inline std::vector<std::string> run_verified(const std::vector<std::string>& connect,
                                             const std::string& job,
                                             const std::string& optimizer,
                                             const std::string& token,
                                             const std::string& rank_racks = {},
                                             const std::vector<std::string>& racks = {},
                                             const std::string& transport = {}) {
  auto n = static_cast<uint32_t>(connect.size());
  std::vector<std::unique_ptr<worker_process>> ws;
  for (uint32_t r = 0; r < n; ++r) {
    auto a = worker_args::of(connect[r], job, r, token);
    a.workers = n;
    a.optimizer = optimizer;
    a.rank_racks = rank_racks;
    a.rack = r < racks.size() ? racks[r] : std::string{};
    a.transport = transport;
    ws.push_back(start_worker(a));
  }
  std::vector<std::string> errs;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (uint32_t r = 0; r < n; ++r) {
    auto out = ws[r]->proc->read_all(deadline);
    auto code = ws[r]->proc->wait_until(deadline);
    errs.push_back(read_file(ws[r]->err_path));
    INFO(job << " rank " << r << ": " << out << errs.back());
    CHECK(code == std::optional<int>{0});
    CHECK_THAT(out, Catch::Contains("verified, bitwise the reference"));
  }
  return errs;
}

} // namespace rw::testing
