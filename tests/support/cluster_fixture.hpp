#pragma once
// A cluster on 127.0.0.1 for one test: a --role coordinator node and two rack-agg
// members (rack-a, rack-b) that joined it through its --listen address, none with open
// jobs; and rw-shell runs against it. Every process is stopped by PID at the end.

#include <string>
#include <vector>

#include <unistd.h>

#include "tests/support/node_process.hpp"

namespace rw::testing {

struct shell_run {
  int code = -1;   // exit code (128 + signal, or -1 if it had to be killed)
  std::string out; // stdout
  std::string err; // stderr
};

/// Runs the program argv[0] with the rest of `argv`, bounded by `timeout`.
inline shell_run run_program(const std::vector<std::string>& args,
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto err_path = temp_path("program.err");
  shell_run r;
  {
    tools::subprocess shell{args, true, err_path};
    auto deadline = std::chrono::steady_clock::now() + timeout;
    r.out = shell.read_all(deadline);
    r.code = shell.wait_until(deadline).value_or(-1);
  }
  r.err = read_file(err_path);
  std::remove(err_path.c_str());
  return r;
}

/// Runs rw-shell with `args` (script mode), bounded by `timeout`.
inline shell_run run_shell(std::vector<std::string> args,
                           std::chrono::seconds timeout = std::chrono::seconds(60)) {
  args.insert(args.begin(), RW_SHELL_PATH);
  return run_program(args, timeout);
}

class cluster {
public:
  /// `member_flags` go to both rack-agg nodes, `coordinator_flags` to the coordinator.
  explicit cluster(std::vector<std::string> coordinator_flags = {},
                   std::vector<std::string> member_flags = {})
    : coordinator_(with({"--name", "coord"}, coordinator_flags),
                   {"coordinator", false, {}}),
      a_(with({"--name", "rack-a"}, member_flags),
         {"rack-agg", false, coordinator_.address()}),
      b_(with({"--name", "rack-b"}, member_flags),
         {"rack-agg", false, coordinator_.address()}) {
    if (!coordinator_.wait_for_log("2 node(s) live", std::chrono::seconds(15)))
      throw std::runtime_error("the nodes did not join the coordinator; its log:\n"
                               + coordinator_.log());
  }

  node_process& coordinator() { return coordinator_; }
  node_process& a() { return a_; }
  node_process& b() { return b_; }

  /// rw-shell --connect (the coordinator's address) -c CODE.
  shell_run shell(const std::string& code) {
    return run_shell({"--connect", coordinator_.address(), "-c", code});
  }

private:
  static std::vector<std::string> with(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  node_process coordinator_;
  node_process a_;
  node_process b_;
};

} // namespace rw::testing
