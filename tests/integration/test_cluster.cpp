// The cluster on 127.0.0.1: a coordinator and two rack-agg nodes, jobs created and
// watched through rw-shell scripts, tokens enforced, jobs kept apart, and what an
// operator sees when input is bad or a node goes away.

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/test_worker.hpp"

namespace rw_integration_cluster {

using namespace rw;

namespace {

std::string scratch_dir() {
  return testing::scratch_dir("cluster");
}

} // namespace

TEST_CASE("rw-shell counts the live nodes through any node's address",
          "[integration][cluster]") {
  testing::cluster c;
  auto r = c.shell("print(#rw.nodes())");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "2\n");
  // Through a rack-agg node's address: it points the shell at the coordinator.
  auto via = testing::run_shell(
    {"--connect", c.a().address(), "-c", "print(#rw.nodes())"});
  INFO(via.err);
  CHECK(via.code == 0);
  CHECK(via.out == "2\n");
  // Without a placement, jobs go to the node with the fewest live jobs.
  auto spread = c.shell("local a = rw.job_create{name='p1', workers=1}; "
                        "local b = rw.job_create{name='p2', workers=1}; "
                        "print(a.node ~= b.node, #rw.jobs())");
  INFO(spread.err);
  CHECK(spread.out == "true\t2\n");
  // A third node under a live node's name is refused, and says why; rack-a stays.
  testing::node_process twin{{"--name", "rack-a"},
                             {"rack-agg", false, c.coordinator().address()}};
  CHECK(twin.wait_for_log("a live node is already named 'rack-a'"));
  CHECK(c.shell("print(#rw.nodes())").out == "2\n");
}

TEST_CASE("a worker with a token refuses a node that does not check it",
          "[integration][cluster]") {
  // An open-jobs node admits anybody to a job nobody created: a worker that holds a
  // token wants the job that token belongs to, so it must not silently join this one.
  testing::node_process open{{}, {"rack-agg", true, {}}};
  testing::worker_args a;
  a.connect = open.address();
  a.job = "squat";
  a.workers = 1;
  a.token = "rwt1_" + std::string(64, 'a');
  a.verify = false;
  auto w = testing::start_worker(a);
  auto [code, out] = testing::finish(*w, 20);
  CHECK(code == std::optional<int>{2});
  CHECK_THAT(out, Catch::Contains("without checking its token"));
}

TEST_CASE("two jobs: separate exact results, tokens enforced, no cross-job access, stop",
          "[integration][cluster]") {
  testing::cluster c;
  auto dir = scratch_dir();
  auto r = testing::run_shell({"--connect", c.coordinator().address(), "-f",
                               RW_SOURCE_DIR "/tests/integration/scripts/two_jobs.lua",
                               "--", RW_TEST_WORKER_PATH, RW_TEST_PROBE_PATH, dir},
                              std::chrono::seconds(120));
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("two_jobs: ok"));
  // The refusals are in the nodes' logs, for an operator.
  CHECK(c.a().wait_for_log("wrong token"));
  CHECK(c.a().wait_for_log("no token"));
  CHECK(c.b().wait_for_log("frame refused"));
  // Each transition is logged once by the coordinator, saying who asked and from where;
  // the nodes log their part of it as theirs.
  auto log = c.coordinator().log();
  CHECK_THAT(log, Catch::Contains("job created: job='beta-job'")
                    && Catch::Contains("by an operator at 127.0.0.1:"));
  CHECK_THAT(
    log, Catch::Contains("job stop asked: job='beta-job' by an operator at 127.0.0.1:"));
  CHECK_THAT(log, Catch::Contains(
                    "job delete asked: job='alpha-job' by an operator at 127.0.0.1:"));
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1))
      ++n;
    return n;
  };
  CHECK(count("job created: job='beta-job'") == 1);
  CHECK(count("job stopped: job='beta-job'") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bad input in the shell: clear errors, non-zero exit",
          "[integration][cluster]") {
  testing::cluster c;
  auto unknown = c.shell("rw.job_status('nope')");
  CHECK(unknown.code == 1);
  CHECK_THAT(unknown.err, Catch::Contains("no job named 'nope'"));

  auto invalid = c.shell("rw.job_create{name='j', workers=0}");
  CHECK(invalid.code == 1);
  CHECK_THAT(invalid.err, Catch::Contains("workers must be 1.."));

  auto placement = c.shell("rw.job_create{name='j', workers=1, node='rack-z'}");
  CHECK(placement.code == 1);
  CHECK_THAT(placement.err, Catch::Contains("no live node is named 'rack-z'"));

  auto command = c.shell("rw.frobnicate()");
  CHECK(command.code == 1);
  CHECK_THAT(command.err, Catch::Contains("not a command"));

  // Errors are Lua errors: a script can catch one and go on.
  auto caught = c.shell("local ok, e = pcall(rw.job_stop, 'nope'); print(ok); "
                        "print(#rw.nodes())");
  CHECK(caught.code == 0);
  CHECK(caught.out == "false\n2\n");

  auto unreachable = testing::run_shell({"--connect", "127.0.0.1:1", "-c", "print(1)"});
  CHECK(unreachable.code == 3);
  CHECK_THAT(unreachable.err, Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("a node that vanishes: bounded errors, its jobs fail, it rejoins",
          "[integration][cluster]") {
  testing::cluster c{{"--node-timeout-ms", "2000"}, {"--heartbeat-ms", "250"}};
  auto made = c.shell(
    "print(rw.job_create{name='held', workers=1, node='rack-b'}.state)");
  INFO(made.err);
  REQUIRE(made.out == "created\n");
  auto mark = c.coordinator().log_mark(); // "node=rack-b" is in its join line already
  c.b().process().signal(SIGSTOP);
  // A request that needs the node: an error within the coordinator's node timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto stop = c.shell("rw.job_stop('held')");
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(stop.code == 1);
  CHECK_THAT(stop.err, Catch::Contains("rack-b did not stop the job"));
  CHECK(took < std::chrono::seconds(10));
  // Silent past the node timeout: gone, and its job failed.
  CHECK(c.coordinator().wait_for_log_after(mark, "node left the cluster: node=rack-b",
                                           std::chrono::seconds(10)));
  CHECK(c.coordinator().wait_for_log_after(mark, "sent no heartbeat",
                                           std::chrono::seconds(10)));
  auto after = c.shell("print(#rw.nodes()); local j = rw.job_status('held'); "
                       "print(j.state); print(j.reason)");
  INFO(after.err);
  CHECK_THAT(after.out, Catch::StartsWith("1\nfailed\nnode rack-b sent no heartbeat"));
  // Back again: it registers anew.
  auto b_mark = c.b().log_mark();
  c.b().process().signal(SIGCONT);
  CHECK(c.b().wait_for_log_after(b_mark, "registering again", std::chrono::seconds(10)));
  std::string live;
  for (int i = 0; i < 20 && live != "2\n"; ++i) { // at most ~10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    live = c.shell("print(#rw.nodes())").out;
  }
  CHECK(live == "2\n");
}

TEST_CASE("a coordinator that stops answering: bounded errors, the script goes on",
          "[integration][cluster]") {
  testing::cluster c;
  // A session that is connected when the coordinator freezes: its next request fails
  // within --timeout, as a Lua error the script can catch, and the script goes on.
  auto err_path = testing::temp_path("shell.err");
  // The script marks the moment its first request was answered; the coordinator
  // freezes then, well inside the script's 1.5 s pause (a condition, not a guess).
  auto mark = testing::temp_path("first-answer");
  std::remove(mark.c_str());
  tools::subprocess shell{{RW_SHELL_PATH, "--connect", c.a().address(), "--timeout",
                           "1500", "-c",
                           "print(#rw.nodes()); io.open('" + mark
                             + "', 'w'):close(); "
                               "rw.sleep(1.5); "
                               "local ok, e = pcall(rw.nodes); print(ok); print(e); "
                               "print('still here')"},
                          true,
                          err_path};
  auto marked_by = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!std::filesystem::exists(mark) && std::chrono::steady_clock::now() < marked_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(std::filesystem::exists(mark));
  c.coordinator().process().signal(SIGSTOP);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto out = shell.read_all(deadline);
  auto code = shell.wait_until(deadline);
  INFO(out << testing::read_file(err_path));
  CHECK(code == 0);
  CHECK_THAT(out, Catch::StartsWith("2\nfalse\n"));
  CHECK_THAT(out, Catch::Contains("did not answer within 1500 ms"));
  CHECK_THAT(out, Catch::EndsWith("still here\n"));
  // A new session cannot complete the handshake: exit 3 within the timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto fresh = testing::run_shell(
    {"--connect", c.a().address(), "--timeout", "1500", "-c", "print(#rw.nodes())"});
  CHECK(fresh.code == 3);
  CHECK_THAT(fresh.err, Catch::Contains("does not answer"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  c.coordinator().process().signal(SIGCONT);
  std::remove(err_path.c_str());
  std::remove(mark.c_str());
}

TEST_CASE("a coordinator that met a shell which left during the handshake stops cleanly",
          "[integration][cluster]") {
  testing::cluster c;
  // Frozen, the coordinator cannot answer: the shell sends its handshake, gives up and
  // exits. Thawed, the coordinator reads that handshake from a closed connection, and
  // CAF 0.17's BASP starts a helper for the new node that nobody will answer (it waits
  // 5 minutes); the coordinator's sweep of departed peers, every quarter of the node
  // timeout, then drops the broker's handle to it. Left running at the exit, the
  // helper crashed the process in the actor system's destructor (caf_peer_sweep.hpp).
  c.coordinator().process().signal(SIGSTOP);
  auto fresh = testing::run_shell(
    {"--connect", c.a().address(), "--timeout", "1000", "-c", "print(#rw.nodes())"});
  c.coordinator().process().signal(SIGCONT);
  CHECK(fresh.code == 3);
  std::this_thread::sleep_for(std::chrono::seconds(3)); // two sweeps at least
  auto& coordinator = c.coordinator().process();
  coordinator.stop(std::chrono::seconds(10));
  auto status = coordinator.wait_until(std::chrono::steady_clock::now());
  INFO(c.coordinator().log_tail(4000));
  CHECK(status == 0);
}

TEST_CASE("with a cluster secret, only nodes and shells that prove it are heard",
          "[integration][cluster]") {
  auto dir = scratch_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    auto path = dir + "/" + name;
    std::ofstream{path} << text << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_read
                                         | std::filesystem::perms::owner_write);
    return path;
  };
  auto secret = write("secret", "correct-horse-battery-staple-42");
  auto wrong = write("wrong", "not-the-cluster-secret-at-all");
  testing::cluster c{{"--cluster-secret-file", secret},
                     {"--cluster-secret-file", secret}};
  auto with = testing::run_shell({"--connect", c.a().address(), "--cluster-secret-file",
                                  secret, "-c", "print(#rw.nodes())"});
  INFO(with.err);
  CHECK(with.code == 0);
  CHECK(with.out == "2\n");
  // Without it, or with another: the TLS handshake fails before a BASP byte is read
  // (the port's certificates are derived from the secret), and the shell says what to
  // give. Before, a shell without it was heard far enough to be refused request by
  // request, and a process that spoofed the coordinator's node id was an operator.
  auto without = c.shell("print(#rw.nodes())");
  CHECK(without.code != 0);
  CHECK_THAT(without.err, Catch::Contains("--cluster-secret-file"));
  auto bad = testing::run_shell({"--connect", c.a().address(), "--cluster-secret-file",
                                 wrong, "-c", "print(#rw.nodes())"});
  CHECK(bad.code != 0);
  CHECK_THAT(bad.err, Catch::Contains("the same --cluster-secret-file"));
  // A node with the wrong secret does not join; it tries again every heartbeat and says
  // so every tenth try, with what to give.
  testing::node_process stray{
    {"--name", "rack-c", "--cluster-secret-file", wrong, "--heartbeat-ms", "200"},
    {"rack-agg", false, c.coordinator().address()}};
  CHECK(stray.wait_for_log("the coordinator must have the same --cluster-secret-file",
                           std::chrono::seconds(20)));
  CHECK(c.coordinator().log().find("node joined the cluster: node=rack-c")
        == std::string::npos);
  // A shell's trust ends with its connection: once it has gone, the coordinator no
  // longer trusts its CAF node id (a process announcing it later proves the secret
  // again); the two member nodes, still connected, stay trusted and heard. First the
  // shell above (`with`) is forgotten: then only the two nodes are trusted.
  const std::string two_left = "trust ended with their connection (2 trusted now)";
  REQUIRE(c.coordinator().wait_for_log(two_left, std::chrono::seconds(10)));
  auto mark = c.coordinator().log_mark();
  auto count = testing::run_shell({"--connect", c.a().address(), "--cluster-secret-file",
                                   secret, "-c", "print(#rw.nodes())"});
  CHECK(count.out == "2\n");
  CHECK(c.coordinator().wait_for_log_after(mark, two_left, std::chrono::seconds(10)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a node or shell with a cluster secret does not join a coordinator that wants "
          "none, and says why",
          "[integration][cluster]") {
  auto dir = scratch_dir();
  auto secret = dir + "/secret";
  std::ofstream{secret} << "correct-horse-battery-staple-42\n";
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read
                                         | std::filesystem::perms::owner_write);
  testing::cluster c; // an open cluster: no --cluster-secret-file
  // A secret makes the control plane TLS (certificates derived from it): a coordinator
  // that speaks plain TCP is not reached, and the line says what to give.
  testing::node_process member{
    {"--name", "rack-s", "--cluster-secret-file", secret, "--heartbeat-ms", "200"},
    {"rack-agg", false, c.coordinator().address()}};
  CHECK(member.wait_for_log("the coordinator must have the same --cluster-secret-file",
                            std::chrono::seconds(20)));
  auto shell = testing::run_shell({"--connect", c.a().address(), "--cluster-secret-file",
                                   secret, "--timeout", "3000", "-c",
                                   "print(#rw.nodes())"});
  CHECK(shell.code != 0);
  CHECK_THAT(shell.err, Catch::Contains("the same --cluster-secret-file"));
  CHECK(c.shell("print(#rw.nodes())").out == "2\n"); // rack-s never joined
  std::filesystem::remove_all(dir);
}

} // namespace rw_integration_cluster
