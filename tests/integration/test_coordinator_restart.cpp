// The coordinator survives its own restart (--state-db): killed with SIGKILL while a
// job trains, the data path does not notice; started again with the same database, it
// has its jobs back, and a job created before the kill admits its workers after it.
// A node that restarted with it gets its waiting job granted again; a node that never
// comes back fails its jobs after the node timeout, and a job created on a node still
// to come back waits for it, as does a shell that asks a node not yet registered. A
// job's checkpoints are kept too: its periodic checkpoints go on, and a node's death
// restarts it from the newest. A database it cannot trust stops it at start, naming
// the file.

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_coordinator_restart {

using namespace rw;
using namespace rw::testing;

namespace {

using clock_type = std::chrono::steady_clock;

// A port on 127.0.0.1 nobody listens on now (the kernel's pick, released at once): the
// coordinator is started twice at the same address, which the nodes know it by.
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// SIGKILL to both nodes (nothing written on the way out); both gone.
void kill_both(std::unique_ptr<node_process>& x, std::unique_ptr<node_process>& y) {
  for (auto* n : {&x, &y})
    (*n)->process().signal(SIGKILL);
  for (auto* n : {&x, &y}) {
    CHECK((*n)->process().wait_until(clock_type::now() + std::chrono::seconds(5))
          == std::optional<int>{128 + SIGKILL});
    n->reset();
  }
}

// rack-a with the coordinator embedded (--state-db `db`): they die and come back
// together.
std::unique_ptr<node_process> embedded_rack_a(const std::string& listen,
                                              const std::string& db,
                                              const std::string& node_timeout_ms) {
  return std::make_unique<node_process>(
    std::vector<std::string>{"--name", "rack-a", "--state-db", db, "--node-timeout-ms",
                             node_timeout_ms},
    node_role{"rack-agg", false, {}, listen});
}

std::unique_ptr<node_process> start_coordinator(const std::string& listen,
                                                const std::string& db) {
  return std::make_unique<node_process>(
    std::vector<std::string>{"--name", "coord", "--state-db", db},
    node_role{"coordinator", false, {}, listen});
}

using worker_run = std::unique_ptr<testing::worker_process>;

// A worker of the fixture job that takes `steps` steps, `delay_ms` apart, and checks
// its result bitwise against the single-process reference.
worker_run paced_worker(const std::string& connect, const std::string& job, uint32_t rank,
                        uint32_t workers, const std::string& token, uint32_t steps,
                        uint32_t delay_ms, std::vector<std::string> extra = {}) {
  auto a = testing::worker_args::of(connect, job, rank, token);
  a.workers = workers;
  a.steps = steps;
  a.step_delay_ms = delay_ms;
  a.extra = std::move(extra);
  return testing::start_worker(a);
}

void check_verified(worker_run& w, const std::string& what,
                    clock_type::time_point deadline) {
  testing::check_verified(*w, what, deadline);
}

std::string scratch_dir() {
  return testing::scratch_dir("state");
}

// rw-node --role coordinator --state-db `db`: its exit code (nullopt: still running
// after 15 s) and what it logged.
std::pair<std::optional<int>, std::string> start_refused(const std::string& db) {
  auto log = temp_path("refused.log");
  std::optional<int> code;
  {
    tools::subprocess node{{RW_NODE_PATH, "--role", "coordinator", "--listen",
                            "127.0.0.1:0", "--state-db", db},
                           false,
                           log};
    code = node.wait_until(clock_type::now() + std::chrono::seconds(15));
  }
  auto text = read_file(log);
  std::remove(log.c_str());
  return {code, text};
}

} // namespace

TEST_CASE("a coordinator killed mid-training comes back with its jobs and their tokens",
          "[integration][cluster][persist]") {
  auto dir = scratch_dir();
  auto db = dir + "/state.db";
  auto listen = "127.0.0.1:" + std::to_string(free_port());
  auto coordinator = start_coordinator(listen, db);
  CHECK(coordinator->wait_for_log("job registry persisted in " + db));
  node_process a{{"--name", "rack-a"}, {"rack-agg", false, listen}};
  node_process b{{"--name", "rack-b"}, {"rack-agg", false, listen}};
  REQUIRE(coordinator->wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  struct stat st {};
  REQUIRE(::stat(db.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  auto shell = [&](const std::string& code) {
    return run_shell({"--connect", listen, "-c", code});
  };
  auto job = [](const std::string& name, const std::string& node) {
    return "rw.job_create{name = '" + name
           + "', workers = 2, optimizer = 'sum', lr = 0.05, "
             "momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB', node = '"
           + node + "'}.token";
  };
  auto made = shell("print(" + job("first", "rack-a") + "); print("
                    + job("second", "rack-b") + ")");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto nl = made.out.find('\n');
  auto first_token = made.out.substr(0, nl);
  auto second_token = made.out.substr(nl + 1, made.out.find('\n', nl + 1) - nl - 1);
  REQUIRE(first_token.size() > 5);
  REQUIRE(second_token.size() > 5);

  // The first job trains: 40 steps, 100 ms apart.
  std::vector<worker_run> first;
  for (uint32_t r = 0; r < 2; ++r)
    first.push_back(paced_worker(a.address(), "first", r, 2, first_token, 40, 100));
  REQUIRE(
    coordinator->wait_for_log("job running: job='first'", std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  // SIGKILL: nothing is written on the way out.
  coordinator->process().signal(SIGKILL);
  CHECK(coordinator->process().wait_until(clock_type::now() + std::chrono::seconds(5))
        == std::optional<int>{128 + SIGKILL});
  // The workers were mid-training when it died...
  for (auto& w : first)
    CHECK_FALSE(w->proc->wait_until(clock_type::now()).has_value());
  CHECK(a.wait_for_log("lost the coordinator", std::chrono::seconds(10)));
  // ...and finish every step, bitwise, with no coordinator: it is not on the data path.
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  for (auto& w : first)
    check_verified(w, "first", deadline);
  CHECK(a.wait_for_log("job ended on this node: state=finished: job='first'",
                       std::chrono::seconds(10)));

  // Started again with the same database: the same jobs, the nodes back in them.
  coordinator.reset();
  coordinator = start_coordinator(listen, db);
  CHECK(coordinator->wait_for_log("registry restored from " + db + ": 2 job(s)"));
  REQUIRE(coordinator->wait_for_log("2 node(s) live", std::chrono::seconds(20)));
  // What the node says of the first job (it finished while the coordinator was down).
  CHECK(
    coordinator->wait_for_log("job reconciled: job='first'", std::chrono::seconds(10)));
  auto jobs = shell(
    "for _, j in ipairs(rw.jobs()) do print(j.name, j.state, j.node) end; "
    "local s = rw.job_status('second'); print(s.name, s.state, s.node)");
  INFO(jobs.err);
  CHECK(jobs.code == 0);
  CHECK(jobs.out
        == "first\tfinished\track-a\nsecond\tcreated\track-b\n"
           "second\tcreated\track-b\n");

  // The second job's token, handed out before the kill, admits its workers now.
  std::vector<worker_run> second;
  for (uint32_t r = 0; r < 2; ++r)
    second.push_back(paced_worker(b.address(), "second", r, 2, second_token, 5, 0));
  deadline = clock_type::now() + std::chrono::seconds(60);
  for (auto& w : second)
    check_verified(w, "second", deadline);
  auto done = shell(
    "rw.wait('second', 'finished'); print(rw.job_status('second').state)");
  INFO(done.err);
  CHECK(done.out == "finished\n");
  // And a wrong token still does not.
  auto wrong = paced_worker(b.address(), "second", 0, 2, first_token, 1, 0);
  CHECK(wrong->proc->wait_until(clock_type::now() + std::chrono::seconds(30))
        != std::optional<int>{0});
  // New jobs take ids the old ones did not have.
  auto ids = shell(
    "local n = rw.job_create{name = 'third', workers = 1, node = 'rack-a'}; "
    "local seen = {}; for _, j in ipairs(rw.jobs()) do "
    "seen[j.id] = (seen[j.id] or 0) + 1 end; local dup = false; "
    "for _, c in pairs(seen) do dup = dup or c > 1 end; print(#rw.jobs(), dup)");
  INFO(ids.err);
  CHECK(ids.out == "3\tfalse\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a state database the coordinator cannot trust stops it at start, named",
          "[integration][cluster][persist]") {
  auto dir = scratch_dir();
  // Not a database.
  auto junk = dir + "/junk.db";
  std::ofstream{junk, std::ios::binary} << std::string(8192, 'x');
  ::chmod(junk.c_str(), 0600);
  auto [code, log] = start_refused(junk);
  INFO(log);
  CHECK(code == std::optional<int>{1});
  CHECK_THAT(log, Catch::Contains("node failed to start: state database " + junk));
  CHECK_THAT(log, Catch::Contains("not a database"));
  // Readable by others: it holds the tokens.
  auto open = dir + "/open.db";
  std::ofstream{open};
  ::chmod(open.c_str(), 0644);
  auto [code2, log2] = start_refused(open);
  INFO(log2);
  CHECK(code2 == std::optional<int>{1});
  CHECK_THAT(log2, Catch::Contains("state database " + open + ": its mode is 0644"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a node that restarted with the coordinator gets its waiting job again, and "
          "one that never comes back fails its jobs after the node timeout",
          "[integration][cluster][persist]") {
  auto dir = scratch_dir();
  auto db = dir + "/state.db";
  // The rack-agg that embeds the coordinator: both die together, and come back.
  auto listen = "127.0.0.1:" + std::to_string(free_port());
  auto embedded = [&] { return embedded_rack_a(listen, db, "4000"); };
  auto first = embedded();
  auto b = std::make_unique<node_process>(std::vector<std::string>{"--name", "rack-b"},
                                          node_role{"rack-agg", false, listen});
  REQUIRE(first->wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  auto shell = [&](const std::string& code) {
    return run_shell({"--connect", listen, "-c", code});
  };
  auto made = shell(
    "print(rw.job_create{name = 'here', workers = 2, optimizer = 'sum', "
    "lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB', "
    "node = 'rack-a'}.token); "
    "print(rw.job_create{name = 'there', workers = 1, optimizer = 'sum', lr = 0.05, "
    "momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB', node = 'rack-b'}.token)");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto nl = made.out.find('\n');
  auto token = made.out.substr(0, nl);
  auto there_token = made.out.substr(nl + 1, made.out.find('\n', nl + 1) - nl - 1);
  // 'there' runs on rack-b when both die (its worker steps far longer than this test).
  auto there = paced_worker(b->address(), "there", 0, 1, there_token, 100000, 100);
  REQUIRE(first->wait_for_log("job running: job='there'", std::chrono::seconds(20)));
  // A status answer waits for what the coordinator recorded before it: the state
  // database says running from here on.
  CHECK(shell("print(rw.job_status('there').state)").out == "running\n");
  kill_both(first, b);

  auto again = embedded();
  CHECK(again->wait_for_log("registry restored from " + db + ": 2 job(s), 2 live"));
  // Until rack-b is back or the node timeout has passed, the running job there is
  // reported as recorded, not as an error ("it has left the cluster").
  auto early = shell("local s = rw.job_status('there'); print(s.state)");
  INFO(early.err);
  CHECK(early.out == "running\n");
  // Its own node lost the job with it: granted again, with the token given out before.
  CHECK(again->wait_for_log("job granted again: job='here'", std::chrono::seconds(10)));
  // rack-b is gone for good: its job fails once the node timeout has passed.
  CHECK(again->wait_for_log("node rack-b did not register again within 4000 ms",
                            std::chrono::seconds(10)));
  auto jobs = shell("for _, j in ipairs(rw.jobs()) do print(j.name, j.state) end; "
                    "print(rw.job_status('there').reason)");
  INFO(jobs.err);
  CHECK(jobs.out
        == "here\tcreated\nthere\tfailed\nnode rack-b did not register again "
           "within 4000 ms of the coordinator's restart\n");
  std::vector<worker_run> workers;
  for (uint32_t r = 0; r < 2; ++r)
    workers.push_back(paced_worker(again->address(), "here", r, 2, token, 3, 0));
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  for (auto& w : workers)
    check_verified(w, "here", deadline);
  there->proc->signal(SIGKILL); // its node is gone: it fails on its own, or is stopped
  there->proc->wait_until(clock_type::now() + std::chrono::seconds(10));
  std::filesystem::remove_all(dir);
}

TEST_CASE("just after a coordinator restart a job created on a node still to register "
          "again waits for it, and one on a node nobody awaits is refused at once",
          "[integration][cluster][persist]") {
  auto dir = scratch_dir();
  auto db = dir + "/state.db";
  auto listen = "127.0.0.1:" + std::to_string(free_port());
  auto embedded = [&] { return embedded_rack_a(listen, db, "8000"); };
  auto rack_b = [&] {
    return std::make_unique<node_process>(std::vector<std::string>{"--name", "rack-b"},
                                          node_role{"rack-agg", false, listen});
  };
  auto first = embedded();
  auto b = rack_b();
  REQUIRE(first->wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  auto shell = [&](const std::string& code) {
    return run_shell({"--connect", listen, "-c", code});
  };
  // A job on rack-b: the restarted coordinator awaits rack-b by name.
  auto made = shell("print(rw.job_create{name = 'there', workers = 1, "
                    "node = 'rack-b'}.token ~= nil)");
  INFO(made.err);
  REQUIRE(made.out == "true\n");
  kill_both(first, b);

  auto again = embedded();
  CHECK(again->wait_for_log("registry restored from " + db + ": 1 job(s), 1 live"));
  // Created on rack-b before rack-b is back: it waits (it used to be refused with "no
  // live node is named 'rack-b'"), and is placed once rack-b registers.
  auto shell_err = temp_path("shell.err");
  tools::subprocess early{{RW_SHELL_PATH, "--connect", listen, "-c",
                           "print(rw.job_create{name = 'early', workers = 1, "
                           "node = 'rack-b'}.node)"},
                          true,
                          shell_err};
  CHECK(again->wait_for_log("job 'early' asked by", std::chrono::seconds(10)));
  CHECK(again->log().find("waits to be placed (no live node is named 'rack-b'")
        != std::string::npos);
  auto deadline = clock_type::now() + std::chrono::seconds(30);
  CHECK_FALSE(early.wait_until(clock_type::now() + std::chrono::milliseconds(500))
                .has_value()); // still waiting: nothing answered it
  b = rack_b();
  auto out = early.read_all(deadline);
  CHECK(early.wait_until(deadline) == std::optional<int>{0});
  INFO(read_file(shell_err));
  CHECK(out == "rack-b\n");
  // Nobody is awaited now: a node that does not exist is refused at once, as ever.
  auto none = shell("rw.job_create{name = 'nowhere', workers = 1, node = 'rack-z'}");
  CHECK(none.code != 0);
  CHECK_THAT(none.err, Catch::Contains("no live node is named 'rack-z'"));
  std::remove(shell_err.c_str());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a shell that reaches a node before the node registered with its coordinator "
          "waits for it within its timeout, and says so when the timeout ends first",
          "[integration][cluster]") {
  // The node's coordinator is not up yet: the node listens, and answers "where is the
  // coordinator" with "not yet" until its link registers (every 100 ms it tries).
  auto listen = "127.0.0.1:" + std::to_string(free_port());
  node_process member{{"--name", "rack-a", "--heartbeat-ms", "100"},
                      node_role{"rack-agg", false, listen}};
  auto short_wait = run_shell(
    {"--connect", member.address(), "--timeout", "2000", "-c", "print(#rw.nodes())"});
  INFO(short_wait.err);
  CHECK(short_wait.code == 3); // not reached
  CHECK_THAT(short_wait.err,
             Catch::Contains("this node has not reached its cluster coordinator yet")
               && Catch::Contains("tries in"));
  // A job created through it meanwhile (the Python package's create_job once failed
  // so, under load, just after its node started) is created once the coordinator
  // comes up and the node registers, 1 s later.
  auto shell_err = temp_path("shell.err");
  tools::subprocess early{{RW_SHELL_PATH, "--connect", member.address(), "--timeout",
                           "20000", "-c",
                           "print(rw.job_create{name = 'early', workers = 1}.node)"},
                          true,
                          shell_err};
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK_FALSE(early.wait_until(clock_type::now()).has_value()); // still asking
  node_process coordinator{{"--name", "coord"},
                           node_role{"coordinator", false, {}, listen}};
  auto deadline = clock_type::now() + std::chrono::seconds(30);
  auto out = early.read_all(deadline);
  CHECK(early.wait_until(deadline) == std::optional<int>{0});
  INFO(read_file(shell_err));
  CHECK(out == "rack-a\n");
  std::remove(shell_err.c_str());
}

TEST_CASE("after a coordinator restart a job's periodic checkpoints go on, and a node's "
          "death restarts it from the newest",
          "[integration][cluster][persist]") {
  auto dir = scratch_dir();
  auto db = dir + "/state.db";
  auto ck = dir + "/periodic";
  auto listen = "127.0.0.1:" + std::to_string(free_port());
  auto coordinator = start_coordinator(listen, db);
  node_process a{{"--name", "rack-a", "--rack", "a"}, {"rack-agg", false, listen}};
  node_process b{{"--name", "rack-b", "--rack", "b"}, {"rack-agg", false, listen}};
  REQUIRE(coordinator->wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  auto shell = [&](const std::string& code) {
    return run_shell({"--connect", listen, "-c", code});
  };
  auto made = shell(
    "print(rw.job_create{name = 'kept', workers = 2, optimizer = 'sum', "
    "lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB', "
    "racks = {'a', 'b'}, reduction = 'flat', replicas = 0, checkpoint_every = 2, "
    "checkpoint_dir = '"
    + ck + "'}.token)");
  INFO(made.err);
  REQUIRE(made.code == 0);
  auto token = made.out.substr(0, made.out.find('\n'));
  // The workers hold before step 6 until the coordinator is back: on a loaded machine
  // the job once ended before node b was killed (no restart to see). After the hold,
  // 94 steps of 60 ms are left for the next checkpoint and the kill.
  auto resume = temp_path("resume");
  std::vector<std::string> hold{"--pause-at",       "6",     "--resume-file", resume,
                                "--pause-limit-ms", "120000"};
  std::vector<worker_run> ws;
  ws.push_back(paced_worker(a.address(), "kept", 0, 2, token, 100, 60, hold));
  ws.push_back(paced_worker(b.address(), "kept", 1, 2, token, 100, 60, hold));
  REQUIRE(shell("rw.wait('kept', 3, {timeout = 30})").code == 0);
  coordinator->process().signal(SIGKILL);
  coordinator.reset();
  coordinator = start_coordinator(listen, db);
  REQUIRE(coordinator->wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  std::ofstream{resume} << "go\n";
  // The restarted coordinator knows the job's checkpoints: it writes the next manifest.
  REQUIRE(coordinator->wait_for_log("periodic checkpoint taken: job='kept'",
                                    std::chrono::seconds(20)));
  b.process().signal(SIGKILL);
  REQUIRE(
    coordinator->wait_for_log("job restarts: job='kept'", std::chrono::seconds(15)));
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  for (auto& w : ws) { // told why, they stop; a launcher starts them again
    w->proc->wait_until(deadline);
  }
  ws.clear();
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(paced_worker(a.address(), "kept", r, 2, token, 100, 0));
  for (uint32_t r = 0; r < 2; ++r)
    check_verified(ws[r], "rank " + std::to_string(r), deadline);
  std::remove(resume.c_str());
  std::filesystem::remove_all(dir);
}

} // namespace rw_integration_coordinator_restart
