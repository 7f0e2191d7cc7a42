// rw.job_set: a hyper-parameter change at a clock, on a flat job over two racks' nodes.
// Both nodes hold the change for the same clock or neither does: the results of every
// chunk (half of them homed on each node) are bitwise SGD with the old learning rate
// up to the clock and the new one from it; a change for a clock some chunk has stepped
// is refused and changes nothing.

#include <filesystem>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_job_set {

using namespace rw;

namespace {

// One SGD step as the node's kernel runs it (runtime/detail/kernels_impl.inc).
float sgd(float p, float grad_sum, float rescale, float lr, float wd) {
  float g = grad_sum * rescale + wd * p;
  return p - lr * g;
}

} // namespace

TEST_CASE("rw.job_set changes the learning rate at a clock on every node, exactly",
          "[integration][racks][job_set]") {
  testing::rack_cluster c{{"a", "b"}};
  std::string err;
  // sgd, lr 0.05, weight decay 0.01 (the fixture's), 4 KiB chunks.
  auto token = c.create("sched", 2, "sgd", "racks = {'a', 'b'}, reduction = 'flat'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  constexpr uint64_t n = 8192; // eight chunks over both nodes
  auto options = [&](uint32_t rank) {
    worker_options o;
    o.connect = c.nodes[rank]->address();
    o.job.name = "sched";
    o.job.tensors = {{"w", n, false}};
    o.spec_from_job = true;
    o.rank = rank;
    o.token = token;
    o.request_timeout = std::chrono::seconds(20);
    return o;
  };
  worker w0{options(0)};
  worker w1{options(1)};
  std::vector<float> g0(n), g1(n), out0(n), out1(n);
  for (uint64_t i = 0; i < n; ++i) {
    g0[i] = 0.001f * static_cast<float>(i % 101);
    g1[i] = 0.5f - 0.002f * static_cast<float>(i % 37);
  }
  auto step = [&] {
    std::thread t{[&] { w1.push_pull("w", g1, out1).get(); }};
    w0.push_pull("w", g0, out0).get();
    t.join();
  };
  step(); // clock 0
  step(); // clock 1
  auto set = c.shell("print(rw.job_set{name = 'sched', at_clock = 2, lr = 0.5})");
  INFO(set.err);
  REQUIRE(set.out == "2\n"); // the chunks had reached clock 2
  step();                    // clock 2: lr 0.5
  auto late = c.shell("rw.job_set{name = 'sched', at_clock = 2, lr = 9}");
  CHECK(late.code != 0);
  CHECK_THAT(late.err, Catch::Contains("at_clock must be >= 3"));
  step(); // clock 3: still 0.5, the refused change left nothing behind
  // Rank 0's own API (a `hyper` frame to its node, which asks the cluster): lr 0.25 and
  // weight decay 0 from clock 4; another rank may not.
  hyper_change by_rank0;
  by_rank0.at_clock = 4;
  by_rank0.learning_rate = 0.25f;
  by_rank0.weight_decay = 0.0f;
  CHECK(w0.set_hyper(by_rank0) == 4);
  try {
    w1.set_hyper(by_rank0);
    FAIL("rank 1 changed the job's hyper-parameters");
  } catch (const error& e) {
    CHECK(e.code() == errc::bad_rank);
  }
  step(); // clock 4
  auto lr_at = [](int clock) { return clock < 2 ? 0.05f : clock < 4 ? 0.5f : 0.25f; };
  for (uint64_t i = 0; i < n; ++i) {
    float p = 0.0f;
    for (int clock = 0; clock < 5; ++clock)
      p = sgd(p, g0[i] + g1[i], 0.5f, lr_at(clock), clock < 4 ? 0.01f : 0.0f);
    REQUIRE(out0[i] == p);
    REQUIRE(out1[i] == p);
  }
  auto status = c.shell("print(rw.job_status('sched').state)");
  CHECK(status.out == "running\n");
}

TEST_CASE("an open job's rank 0 changes its hyper-parameters on its node",
          "[integration][job_set]") {
  testing::node_process node{{"--open-jobs"}};
  worker_options o;
  o.connect = node.address();
  o.job.name = "open-sched";
  o.job.num_workers = 1;
  o.job.chunk_bytes = 4096;
  o.job.optimizer.kind = optimizer_kind::sgd;
  o.job.optimizer.learning_rate = 0.1f;
  o.job.tensors = {{"w", 3000, false}};
  o.request_timeout = std::chrono::seconds(20);
  worker w{o};
  std::vector<float> g(3000, 1.0f), out(3000);
  w.push_pull("w", g, out).get(); // clock 0: lr 0.1
  hyper_change c;
  c.at_clock = 1;
  c.learning_rate = 0.5f;
  CHECK(w.set_hyper(c) == 1);
  w.push_pull("w", g, out).get(); // clock 1: lr 0.5
  float want = sgd(sgd(0.0f, 1.0f, 1.0f, 0.1f, 0.0f), 1.0f, 1.0f, 0.5f, 0.0f);
  CHECK(out[0] == want);
  CHECK(out[2999] == want);
  try {
    w.set_hyper(c); // clock 1 has run
    FAIL("a change for a clock already run was taken");
  } catch (const error& e) {
    CHECK(e.code() == errc::clock_out_of_range);
    CHECK_THAT(e.what(), Catch::Contains("at_clock must be >= 2"));
  }
  hyper_change none;
  none.at_clock = 5;
  CHECK_THROWS_AS(w.set_hyper(none), error); // nothing to change
  CHECK(node.wait_for_log("hyper-parameters: job='open-sched'"));
}

TEST_CASE(
  "a checkpoint keeps the job's hyper-parameter changes, the restored job goes on "
  "with them",
  "[integration][job_set][checkpoint]") {
  testing::rack_cluster c{{"a"}};
  std::string err;
  auto token = c.create("before", 1, "sgd", "node = 'n0'", &err);
  INFO(err);
  REQUIRE(!token.empty());
  auto join = [&](const std::string& job, const std::string& tok) {
    worker_options o;
    o.connect = c.nodes[0]->address();
    o.job.name = job;
    o.job.tensors = {{"w", 3000, false}};
    o.spec_from_job = true;
    o.token = tok;
    o.request_timeout = std::chrono::seconds(20);
    return o;
  };
  std::vector<float> g(3000, 1.0f), out(3000);
  {
    worker w{join("before", token)};
    w.push_pull("w", g, out).get(); // clock 0: lr 0.05
    hyper_change c1;
    c1.at_clock = 1;
    c1.learning_rate = 0.5f;
    CHECK(w.set_hyper(c1) == 1);
    w.push_pull("w", g, out).get(); // clock 1: lr 0.5
  }                                 // bye: the job finishes at clock 2
  auto dir = testing::temp_path("sched-ckpt");
  auto taken = c.shell("rw.wait('before', 'finished', {timeout = 30}); "
                       "print(rw.checkpoint('before', '"
                       + dir + "').clock)");
  INFO(taken.err);
  REQUIRE(taken.out == "2\n");
  auto made = c.shell(
    "print(rw.job_create{name = 'after', workers = 1, optimizer = 'sgd', "
    "lr = 0.05, weight_decay = 0.01, chunk_bytes = '4KiB', node = 'n0', "
    "restore = '"
    + dir + "'}.token)");
  INFO(made.err);
  REQUIRE(made.code == 0);
  worker w{join("after", made.out.substr(0, made.out.find('\n')))};
  CHECK(w.clock("w") == 2);
  w.push_pull("w", g, out).get(); // clock 2: still lr 0.5, from the checkpoint's schedule
  float p = 0.0f;
  for (float lr : {0.05f, 0.5f, 0.5f})
    p = sgd(p, 1.0f, 1.0f, lr, 0.01f);
  CHECK(out[0] == p);
  CHECK(out[2999] == p);
  std::filesystem::remove_all(dir);
}

} // namespace rw_integration_job_set
