// Saving and resuming the optimizer state the node holds (worker::pull_state,
// load_state, go_on_from; the `state` frames). A job that saves its parameters and
// optimizer state at a clock, and a new job that starts from them, end bitwise where the
// first job ends, over every transport and for optimizers with 0, 1 and 2 arrays (Adam's
// bias correction counts the loaded clock); and what is refused, to whom, with what.

#include <chrono>
#include <optional>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "protocol/control.hpp"
#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_checks.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_optimizer_state {

using namespace rw;
using protocol::frame_header;
using protocol::frame_kind;

namespace {

constexpr uint64_t n = 2500; // three chunks of 4 KiB: 1024, 1024, 452

worker_options options(const std::string& address, const std::string& job, uint32_t rank,
                       const std::string& transport, optimizer_kind kind) {
  auto o = testing::job_options(address, job, rank, transport, n, 2);
  o.job.tensors = {{"t", n, true}};
  o.job.optimizer = {kind, 0.05f};
  return o;
}

// Rank r's gradient of step `clock` (1-based): differs by rank, element and step.
std::vector<float> gradient(uint32_t rank, uint64_t clock) {
  std::vector<float> g(n);
  for (uint64_t i = 0; i < n; ++i)
    g[i] = 0.01f * static_cast<float>((i * 7 + rank * 13 + clock * 29) % 61) - 0.3f;
  return g;
}

// Whether two buffers hold the same bits (empty ones included: memcmp takes no null).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Steps from+1..to on both ranks; each rank's parameters end in out[rank].
void steps(worker& w0, worker& w1, uint64_t from, uint64_t to,
           std::vector<float> (&out)[2]) {
  for (uint64_t c = from + 1; c <= to; ++c) {
    auto g0 = gradient(0, c), g1 = gradient(1, c);
    auto f1 = w1.push_pull("t", g1, out[1]);
    w0.push_pull("t", g0, out[0]).get();
    f1.get();
  }
}

} // namespace

TEST_CASE("a saved optimizer state resumes a new job bitwise where the first one goes",
          "[integration][optimizer_state]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports())
    for (auto kind :
         {optimizer_kind::adam, optimizer_kind::momentum, optimizer_kind::sgd}) {
      INFO(transport << ", " << to_string(kind));
      auto name = fmt::format("state-{}-{}", transport, to_string(kind));
      std::vector<float> init(n);
      for (uint64_t i = 0; i < n; ++i)
        init[i] = 0.001f * static_cast<float>(i % 97);
      std::vector<float> out[2] = {std::vector<float>(n), std::vector<float>(n)};
      std::vector<float> saved_params, saved_state, end_params, end_state;
      uint64_t saved_clock = 0;
      {
        worker w0{options(node.address(), name, 0, transport, kind)};
        worker w1{options(node.address(), name, 1, transport, kind)};
        const uint32_t arrays = w0.state_arrays();
        CHECK(arrays
              == (kind == optimizer_kind::adam       ? 2u
                  : kind == optimizer_kind::momentum ? 1u
                                                     : 0u));
        w0.init("t", init).get();
        steps(w0, w1, 0, 3, out);
        saved_params = out[0];
        saved_state.assign(arrays * n, -1.0f);
        saved_clock = w0.pull_state("t", saved_state);
        CHECK(saved_clock == 3);
        std::vector<float> other(arrays * n);
        CHECK(w1.pull_state("t", other) == 3); // any rank reads; the same bytes
        CHECK(same_bits(other, saved_state));
        if (arrays > 0)
          CHECK(saved_state[0] != 0.0f); // the momentum / first moment is real
        steps(w0, w1, 3, 6, out);
        end_params = out[0];
        end_state.assign(arrays * n, 0.0f);
        CHECK(w0.pull_state("t", end_state) == 6);
        // Loading into a job past version 0: refused, nothing changes.
        try {
          w0.load_state("t", saved_state, saved_clock);
          FAIL("a state loaded into a job at clock 6");
        } catch (const error& e) {
          CHECK(e.code() == errc::clock_out_of_range);
          CHECK_THAT(e.what(), Catch::Contains("is at version 6"));
        }
        std::vector<float> again(arrays * n);
        CHECK(w0.pull_state("t", again) == 6);
        CHECK(same_bits(again, end_state));
      }
      // The new job: rank 0 starts from the saved parameters and loads the state; rank 1
      // waits for it and goes on from the saved clock.
      auto resumed = name + "-resumed";
      worker w0{options(node.address(), resumed, 0, transport, kind)};
      worker w1{options(node.address(), resumed, 1, transport, kind)};
      std::thread other{[&] { w1.go_on_from("t", saved_clock); }};
      std::this_thread::sleep_for(std::chrono::milliseconds(50)); // rank 1 waits first
      w0.init("t", saved_params).get();
      w0.load_state("t", saved_state, saved_clock);
      other.join();
      CHECK(w0.clock("t") == 3);
      CHECK(w1.clock("t") == 3);
      steps(w0, w1, 3, 6, out);
      CHECK(same_bits(out[0], end_params));
      CHECK(same_bits(out[1], end_params));
      std::vector<float> state(w0.state_arrays() * n);
      CHECK(w1.pull_state("t", state) == 6);
      CHECK(same_bits(state, end_state));
      CHECK(w0.clock("t") == 6);
    }
}

TEST_CASE("what a worker's optimizer-state calls refuse, and why",
          "[integration][optimizer_state][bad]") {
  testing::node_process node;
  worker w0{options(node.address(), "refusals", 0, "tcp", optimizer_kind::adam)};
  worker w1{options(node.address(), "refusals", 1, "tcp", optimizer_kind::adam)};
  std::vector<float> init(n, 0.5f), state(2 * n, 0.0f), short_buffer(n);
  w0.init("t", init).get();
  auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const error& e) {
      INFO(e.what());
      return e.code();
    }
    return errc::ok;
  };
  // Another rank loads nothing; a buffer of one array's length is not the state.
  CHECK(code_of([&] { w1.load_state("t", state, 4); }) == errc::bad_rank);
  CHECK(code_of([&] { w0.pull_state("t", short_buffer); }) == errc::bad_buffer);
  CHECK(code_of([&] { w0.load_state("t", short_buffer, 4); }) == errc::bad_buffer);
  CHECK(code_of([&] { w0.pull_state("nope", state); }) == errc::unknown_tensor);
  // Rank 1 waiting for a load that never comes: a timeout naming what it waited for.
  worker_options quick = options(node.address(), "refusals-wait", 0, "tcp",
                                 optimizer_kind::adam);
  quick.request_timeout = std::chrono::milliseconds(400);
  worker lone0{quick};
  lone0.init("t", init).get();
  try {
    lone0.go_on_from("t", 9);
    FAIL("went on from a clock nobody loaded");
  } catch (const error& e) {
    CHECK(e.code() == errc::timeout);
    CHECK_THAT(e.what(), Catch::Contains("did not reach clock 9"));
  }
  // An SSP job's chunks are at no one clock: refused by the node.
  auto ssp = options(node.address(), "refusals-ssp", 0, "tcp", optimizer_kind::adam);
  ssp.job.num_workers = 1;
  ssp.job.consistency = {consistency_spec::ssp, 2};
  worker s{ssp};
  s.init("t", init).get();
  try {
    s.pull_state("t", state);
    FAIL("read an SSP job's state");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_spec);
    CHECK_THAT(e.what(), Catch::Contains("BSP jobs only"));
  }
  // The same frames from a raw client: rank 1's load, a load of the wrong size, an
  // array the optimizer lacks, a flag that is no state flag, and before joining.
  testing::raw_client raw{node.address()};
  auto spec = options({}, "refusals-raw", 1, "tcp", optimizer_kind::momentum).job;
  auto id = raw.join(spec, 1);
  auto refused = [&](frame_header h, const std::vector<float>& payload) {
    h.job_id = id;
    h.rank = 1;
    if (payload.empty())
      raw.send_frame(h);
    else
      raw.send_floats(h, payload);
    auto f = raw.read_frame(std::chrono::seconds(5));
    REQUIRE(f);
    REQUIRE(f->header.kind == frame_kind::error);
    CHECK(f->header.staleness == h.staleness); // about the request it answers
    return f->error();
  };
  frame_header load;
  load.kind = frame_kind::state;
  load.flags = protocol::flag_state_load;
  load.clock = 3;
  load.staleness = 0;
  auto e = refused(load, std::vector<float>(1024, 1.0f));
  CHECK(e.code == errc::bad_rank);
  CHECK_THAT(e.message, Catch::Contains("only rank 0 loads the optimizer state"));
  e = refused(load, std::vector<float>(7, 1.0f));
  CHECK(e.code == errc::bad_chunk);
  CHECK_THAT(e.message, Catch::Contains("carries 28 bytes, not 4096"));
  frame_header read;
  read.kind = frame_kind::state;
  read.staleness = 1; // momentum keeps one array
  e = refused(read, {});
  CHECK(e.code == errc::bad_chunk);
  CHECK_THAT(e.message,
             Catch::Contains("keeps 1 arrays per element, there is no array 1"));
  read.flags = 1;
  e = refused(read, {});
  CHECK(e.code == errc::bad_frame);
  read.flags = 0;
  read.staleness = protocol::state_version_only;
  read.job_id = id;
  read.rank = 1;
  raw.send_frame(read); // the version alone: answered, no payload
  auto answer = raw.read_frame(std::chrono::seconds(5));
  REQUIRE(answer);
  CHECK(answer->header.kind == frame_kind::state);
  CHECK(answer->header.payload_bytes == 0);
  CHECK(answer->header.clock == 0);
  testing::raw_client stranger{node.address()};
  stranger.send_frame(read);
  auto not_joined = stranger.read_frame(std::chrono::seconds(5));
  REQUIRE(not_joined);
  CHECK(not_joined->error().code == errc::not_joined);
  testing::check_node_serves(node.address(), "after-state-refusals");
}

TEST_CASE("a state call about a job that is gone ends at once, answered with its tag",
          "[integration][optimizer_state][bad]") {
  // The shard's refusal of a job it no longer holds carries the call's tag (`ring`)
  // and array (`staleness`) as every other state answer does: without them the worker
  // could not tell which call it ends, and waited for its timeout.
  testing::node_process node{{"--step-timeout-ms", "300"}};
  auto o = options(node.address(), "state-gone", 0, "tcp", optimizer_kind::adam);
  o.request_timeout = std::chrono::seconds(20);
  worker w{o};
  testing::raw_client idle{node.address()};
  auto id = idle.join(o.job, 1); // joined, never pushes: the step times out
  std::vector<float> init(n, 0.5f), out(n), state(2 * n);
  w.init("t", init).get();
  auto g = gradient(0, 1);
  try {
    w.push_pull("t", g, out).get();
    FAIL("the step completed without rank 1");
  } catch (const error& e) {
    CHECK(e.code() == errc::step_timeout);
  }
  REQUIRE(node.wait_for_log("job failed"));

  frame_header read;
  read.kind = frame_kind::state;
  read.job_id = id;
  read.rank = 1;
  read.staleness = 1; // Adam's second array
  read.ring = 77;     // the call's tag
  idle.send_frame(read);
  std::optional<testing::raw_frame> f;
  for (int i = 0; i < 10 && (!f || f->header.kind != frame_kind::error); ++i)
    f = idle.read_frame(std::chrono::seconds(5)); // skipping the step's own refusal
  REQUIRE(f);
  REQUIRE(f->header.kind == frame_kind::error);
  CHECK(f->header.ring == 77);
  CHECK(f->header.staleness == 1);
  CHECK(f->error().code == errc::step_timeout);
  CHECK_THAT(f->error().message, Catch::Contains("is gone"));

  // The worker's own call: refused at once, not at its 20 s timeout.
  auto t0 = std::chrono::steady_clock::now();
  try {
    w.pull_state("t", state);
    FAIL("read the state of a job that failed");
  } catch (const error& e) {
    CHECK(e.code() != errc::timeout);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

} // namespace rw_integration_optimizer_state
