// Checkpoints on 127.0.0.1: a two-node flat Adam job is checkpointed at clock 3 while
// it runs (its workers held there) and again when it has finished; jobs restored from
// those checkpoints on one and on three nodes go on, and their final parameters are
// bitwise those of the uninterrupted run (the workers verify against the single-process
// reference of all the steps). Bad directories, damaged files and spec mismatches are
// refused with clear errors. checkpoint_every writes a checkpoint at every N-th clock;
// a node killed while a checkpoint waits fails it and no manifest is written; a
// hierarchical job is checkpointed at its top level and restored hierarchically or
// flat; without a clock a running job is taken one past every rank's clock.

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "runtime/checkpoint/manifest.hpp"

#include "tests/support/rack_cluster.hpp"

namespace rw_integration_checkpoint {

using namespace rw;
namespace fs = std::filesystem;

namespace {

using testing::rack_cluster;

// A fresh directory path (not created), removed at the end.
struct scratch_dir {
  std::string path = testing::temp_path("ckpt");
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

using ckpt_worker = std::unique_ptr<testing::worker_process>;

// A worker of the fixture job (adam), verifying its result after `steps` steps.
ckpt_worker start(const std::string& connect, const std::string& job, uint32_t rank,
                  uint32_t workers, const std::string& token, uint32_t steps,
                  std::vector<std::string> extra = {}) {
  auto a = testing::worker_args::of(connect, job, rank, token);
  a.workers = workers;
  a.optimizer = "adam";
  a.steps = steps;
  a.extra = std::move(extra);
  return testing::start_worker(a);
}

// Every worker ends 0, verified bitwise against the reference.
// `context`, if given, is read once the workers ended and shown with a failure (the
// nodes' logs, where a failure seen once needs them to be explained).
void expect_verified(std::vector<ckpt_worker>& ws, const std::string& what,
                     const std::function<std::string()>& context = {}) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (size_t r = 0; r < ws.size(); ++r) {
    testing::check_verified(*ws[r], what + " rank " + std::to_string(r), deadline,
                            context ? context() : std::string{});
  }
}

// Restores `dir` as job `name` on `nodes` and runs its two workers from `from` to
// `steps`; they must end bitwise at the uninterrupted run's parameters.
void restore_and_verify(rack_cluster& c, const std::string& name,
                        const std::string& nodes, const std::string& at,
                        const std::string& dir, uint32_t from, uint32_t steps,
                        std::vector<std::string> extra = {}) {
  std::string err;
  auto token = c.create(name, 2, "adam",
                        "nodes = {" + nodes
                          + "}, reduction = 'flat', "
                            "restore = '"
                          + dir + "'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  std::vector<ckpt_worker> ws;
  extra.push_back("--start-clock");
  extra.push_back(std::to_string(from));
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(at, name, r, 2, token, steps, extra));
  expect_verified(ws, name);
}

} // namespace

TEST_CASE(
  "a checkpoint of a running and of a finished adam job restores on one and three "
  "nodes, bitwise the uninterrupted run",
  "[integration][checkpoint]") {
  rack_cluster c{{"a", "b", "c"}};
  std::string err;
  auto token = c.create("train", 2, "adam", "nodes = {'n0', 'n1'}, reduction = 'flat'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[r]->address(), "train", r, 2, token, 6,
                       {"--pause-at", "3", "--resume-file", resume}));
  scratch_dir at3, at6;
  // Held after 3 steps: every chunk reaches version 3 and waits there.
  auto taken = c.shell("rw.wait('train', 3, {timeout = 30}); "
                       "local k = rw.checkpoint('train', '"
                       + at3.path
                       + "', {clock = 3}); "
                         "print(k.clock, #k.files, k.bytes > 0)");
  INFO(taken.err);
  CHECK(taken.out == "3\t2\ttrue\n");
  std::ofstream{resume} << "go";
  expect_verified(ws, "train"); // 6 steps, uninterrupted as far as the workers can tell
  std::remove(resume.c_str());
  CHECK(fs::exists(fs::path{at3.path} / "MANIFEST"));
  CHECK(fs::exists(fs::path{at3.path} / "chunks-n0.rwck"));
  CHECK(fs::exists(fs::path{at3.path} / "chunks-n1.rwck"));

  auto finished = c.shell("rw.wait('train', 'finished', {timeout = 30}); "
                          "local k = rw.checkpoint('train', '"
                          + at6.path + "'); print(k.clock)");
  INFO(finished.err);
  CHECK(finished.out == "6\n");

  restore_and_verify(c, "one", "'n2'", c.nodes[2]->address(), at3.path, 3, 6);
  restore_and_verify(c, "three", "'n0', 'n1', 'n2'", c.nodes[1]->address(), at3.path, 3,
                     6);
  restore_and_verify(c, "more", "'n1'", c.nodes[1]->address(), at6.path, 6,
                     8); // 8 in all
}

TEST_CASE("bad checkpoint directories and restores are refused, saying why",
          "[integration][checkpoint]") {
  rack_cluster c{{"a"}};
  std::string err;
  auto token = c.create("small", 2, "adam", "node = 'n0'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[0]->address(), "small", r, 2, token, 2));
  expect_verified(ws, "small");
  scratch_dir good, used;
  auto ok = c.shell("rw.wait('small', 'finished', {timeout = 30}); "
                    "print(rw.checkpoint('small', '"
                    + good.path + "').clock)");
  INFO(ok.err);
  REQUIRE(ok.out == "2\n");

  fs::create_directories(used.path);
  std::ofstream{fs::path{used.path} / "something"} << "x";
  auto busy = c.shell("rw.checkpoint('small', '" + used.path + "')");
  CHECK(busy.code != 0);
  CHECK_THAT(busy.err, Catch::Contains("not empty"));

  auto unknown = c.shell("rw.checkpoint('nope', '" + good.path + "-x')");
  CHECK_THAT(unknown.err, Catch::Contains("no job named 'nope'"));

  // No manifest: not a checkpoint.
  c.create("bare", 2, "adam", "node = 'n0', restore = '" + used.path + "'", &err);
  CHECK_THAT(err, Catch::Contains("MANIFEST"));
  // Another chunk size: the chunks would not line up.
  auto r = c.shell("rw.job_create{name = 'wide', workers = 2, optimizer = 'adam', "
                   "chunk_bytes = '8KiB', node = 'n0', restore = '"
                   + good.path + "'}");
  CHECK_THAT(r.err, Catch::Contains("4096-byte chunks"));
  r = c.shell("rw.job_create{name = 'other', workers = 2, optimizer = 'sgd', "
              "chunk_bytes = '4KiB', node = 'n0', restore = '"
              + good.path + "'}");
  CHECK_THAT(r.err, Catch::Contains("optimizer is adam"));

  // A flipped byte in a chunk file: the job is created, its first worker is refused.
  auto file = fs::path{good.path} / "chunks-n0.rwck";
  {
    std::fstream f{file, std::ios::in | std::ios::out | std::ios::binary};
    f.seekg(200);
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 1);
    f.seekp(200);
    f.write(&b, 1);
  }
  auto damaged = c.create("damaged", 2, "adam",
                          "node = 'n0', restore = '" + good.path + "'", &err);
  INFO(err);
  REQUIRE(!damaged.empty());
  auto w = start(c.nodes[0]->address(), "damaged", 0, 2, damaged, 4,
                 {"--start-clock", "2"});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto code = w->proc->wait_until(deadline);
  auto why = testing::read_file(w->err_path);
  INFO(why);
  CHECK(code == std::optional<int>{2});
  CHECK_THAT(why, Catch::Contains("checksum") && Catch::Contains("damaged"));
}

TEST_CASE("checkpoint_every writes a checkpoint at every N-th clock, without the shell",
          "[integration][checkpoint]") {
  rack_cluster c{{"a", "b"}};
  scratch_dir every;
  std::string err;
  auto token = c.create("periodic", 2, "adam",
                        "nodes = {'n0', 'n1'}, reduction = 'flat', checkpoint_every = 2, "
                        "checkpoint_dir = '"
                          + every.path + "'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[r]->address(), "periodic", r, 2, token, 5));
  expect_verified(ws, "periodic");
  for (auto clock : {"2", "4"})
    CHECK(c.coordinator.wait_for_log(
      std::string{"periodic checkpoint taken: job='periodic'"} + " dir='" + every.path
        + "/clock-000000000" + clock + "' clock=" + clock,
      std::chrono::seconds(30)));
  auto at = [&](int clock) {
    return (fs::path{every.path} / fmt::format("clock-{:010}", clock)).string();
  };
  CHECK(runtime::checkpoint::read_manifest(at(2)).clock == 2);
  CHECK(runtime::checkpoint::read_manifest(at(4)).clock == 4);
  CHECK(!fs::exists(at(6))); // 5 steps: no clock 6
  std::vector<std::string> entries;
  for (auto& e : fs::directory_iterator(every.path))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{"clock-0000000002", "clock-0000000004"});
  // Each is a checkpoint like any other: clock 4 on one node, on to 5 steps.
  restore_and_verify(c, "from-4", "'n1'", c.nodes[1]->address(), at(4), 4, 5);
  // A new job given this run's checkpoint_dir would write over its checkpoints.
  auto again = c.create(
    "again", 2, "adam",
    "node = 'n0', checkpoint_every = 2, checkpoint_dir = '" + every.path + "'", &err);
  CHECK(again.empty());
  CHECK_THAT(err, Catch::Contains("checkpoint_dir") && Catch::Contains("not empty")
                    && Catch::Contains("another run"));
  CHECK(c.coordinator.wait_for_log("job not created: job='again'"));
}

TEST_CASE("a node that dies during a checkpoint fails it with the reason and leaves no "
          "manifest",
          "[integration][checkpoint]") {
  rack_cluster c{{"a", "b"}};
  std::string err;
  auto token = c.create("doomed", 2, "adam", "nodes = {'n0', 'n1'}, reduction = 'flat'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto never = testing::temp_path("never");
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(
      start(c.nodes[r]->address(), "doomed", r, 2, token, 6,
            {"--pause-at", "3", "--resume-file", never, "--pause-limit-ms", "20000"}));
  auto held = c.shell("rw.wait('doomed', 3, {timeout = 30}); print('held')");
  INFO(held.err);
  REQUIRE(held.out == "held\n");
  scratch_dir dir;
  // Clock 5 is ahead of the held workers: the checkpoint waits for it on the shards.
  auto shell_err = testing::temp_path("shell.err");
  tools::subprocess shell{{RW_SHELL_PATH, "--connect", c.coordinator.address(), "-c",
                           "rw.checkpoint('doomed', '" + dir.path + "', {clock = 5})"},
                          true,
                          shell_err};
  REQUIRE(c.coordinator.wait_for_log("checkpoint asked: job='doomed'",
                                     std::chrono::seconds(30)));
  c.nodes[1]->process().signal(SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  shell.read_all(deadline);
  auto code = shell.wait_until(deadline);
  auto why = testing::read_file(shell_err);
  INFO(why);
  CHECK(code.has_value());
  CHECK(code != std::optional<int>{0});
  // The first failure answers: the dead node's, or the job's failure as the other node
  // saw it (its workers lost n1 and left, or the cluster failed the job naming n1).
  CHECK_THAT(why, Catch::Contains("failed, no manifest written: node n"));
  CHECK(!fs::exists(fs::path{dir.path} / "MANIFEST"));
  for (auto& w : ws) {
    w->proc->signal(SIGKILL);
    w->proc->wait_until(deadline);
  }
  std::remove(shell_err.c_str());
}

TEST_CASE(
  "a hierarchical job is checkpointed at its chunks' homes, without a clock a running "
  "job is taken at the next one",
  "[integration][checkpoint]") {
  rack_cluster c{{"a", "b"}};
  std::string err;
  auto token = c.create(
    "hier", 2, "adam",
    "racks = {'a', 'b'}, reduction = 'hierarchical', worker_racks = {'a', 'b'}", &err);
  INFO(err);
  REQUIRE(!token.empty());
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(
      start(c.nodes[r]->address(), "hier", r, 2, token, 3, {"--rank-racks", "0,1"}));
  expect_verified(ws, "hier");
  scratch_dir hier;
  auto taken = c.shell("rw.wait('hier', 'finished', {timeout = 30}); "
                       "print(rw.checkpoint('hier', '"
                       + hier.path + "').clock)");
  INFO(taken.err);
  REQUIRE(taken.out == "3\n");
  // Restored flat on one node with no step to go: the workers read version 3 and find
  // it bitwise the hierarchical run's (racks summed first).
  restore_and_verify(c, "hier-back", "'n0'", c.nodes[0]->address(), hier.path, 3, 3,
                     {"--rank-racks", "0,1"});
  // Restored hierarchical again, three more steps: the top level starts from the
  // checkpoint at the chunks' homes, each rack's part from its parameters; the workers
  // go on from clock 3 (their welcome says so) and end at the 6-step run's result.
  token = c.create(
    "hier-again", 2, "adam",
    "racks = {'a', 'b'}, reduction = 'hierarchical', worker_racks = {'a', 'b'}, "
    "restore = '"
      + hier.path + "'",
    &err);
  INFO(err);
  REQUIRE(!token.empty());
  ws.clear();
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[r]->address(), "hier-again", r, 2, token, 6,
                       {"--rank-racks", "0,1"}));
  // Twice (full-suite runs under load) tensor alpha, the one with initial values, was
  // not bitwise here: the nodes' logs go with a failure.
  expect_verified(ws, "hier-again", [&] {
    return "node n0's log, the end:\n" + c.nodes[0]->log_tail(12000)
           + "\nnode n1's log, the end:\n" + c.nodes[1]->log_tail(12000);
  });

  token = c.create("next", 2, "adam", "nodes = {'n0', 'n1'}, reduction = 'flat'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto resume = testing::temp_path("resume");
  ws.clear();
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[r]->address(), "next", r, 2, token, 6,
                       {"--pause-at", "3", "--resume-file", resume}));
  auto held = c.shell("rw.wait('next', 3, {timeout = 30}); print('held')");
  INFO(held.err);
  REQUIRE(held.out == "held\n");
  scratch_dir next;
  auto shell_err = testing::temp_path("shell.err");
  tools::subprocess shell{{RW_SHELL_PATH, "--connect", c.coordinator.address(), "-c",
                           "print(rw.checkpoint('next', '" + next.path + "').clock)"},
                          true,
                          shell_err};
  // Once both nodes' shards wait for the clock, the workers go on and reach it.
  for (auto& n : c.nodes)
    CHECK(n->wait_for_log("checkpoint requested: job='next'", std::chrono::seconds(30)));
  std::ofstream{resume} << "go";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto out = shell.read_all(deadline);
  shell.wait_until(deadline);
  INFO(testing::read_file(shell_err));
  CHECK(out == "4\n"); // one past every rank's clock 3
  expect_verified(ws, "next");
  std::remove(resume.c_str());
  std::remove(shell_err.c_str());
  restore_and_verify(c, "next-back", "'n1'", c.nodes[1]->address(), next.path, 4, 6);
}

TEST_CASE(
  "a finished job's chunks are released after --keep-finished-ms and a checkpoint "
  "of it is then refused saying so",
  "[integration][checkpoint]") {
  rack_cluster c{{"a"}, {"--keep-finished-ms", "500"}};
  std::string err;
  auto token = c.create("brief", 2, "adam", "nodes = {'n0'}", &err);
  INFO(err);
  REQUIRE(!token.empty());
  std::vector<ckpt_worker> ws;
  for (uint32_t r = 0; r < 2; ++r)
    ws.push_back(start(c.nodes[0]->address(), "brief", r, 2, token, 2));
  expect_verified(ws, "brief");
  auto finished = c.shell(
    "rw.wait('brief', 'finished', {timeout = 30}); print('finished')");
  INFO(finished.err);
  REQUIRE(finished.out == "finished\n");
  // Well past 500 ms and the shards' 250 ms scan: the chunks are gone.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  scratch_dir dir;
  auto late = c.shell("rw.checkpoint('brief', '" + dir.path + "')");
  CHECK(late.out.empty());
  CHECK_THAT(late.err, Catch::Contains("released 500 ms after it ended"));
  CHECK_THAT(late.err, Catch::Contains("--keep-finished-ms"));
  CHECK(!fs::exists(fs::path{dir.path} / "MANIFEST"));
}

} // namespace rw_integration_checkpoint
