// Every bad input gets a clear error (to the peer and in the log), the node keeps
// serving everyone else, and nobody hangs.

#include <cstring>
#include <future>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "rackweave/defaults.hpp"
#include "rackweave/worker.hpp"
#include "tests/support/node_checks.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/expect_error.hpp"
#include "tests/support/raw_client.hpp"
#include "protocol/control.hpp"

namespace rw_integration_bad_input {

using namespace rw;
using protocol::frame_header;
using protocol::frame_kind;
using testing::check_node_serves;

namespace {

job_spec small_job(const std::string& name, uint32_t workers, uint64_t elements = 3000) {
  job_spec s;
  s.name = name;
  s.num_workers = workers;
  s.chunk_bytes = 4096;
  s.tensors = {{"t", elements, false}};
  return s;
}

worker_options options(const std::string& address, job_spec spec, uint32_t rank) {
  worker_options o;
  o.connect = address;
  o.job = std::move(spec);
  o.rank = rank;
  o.request_timeout = std::chrono::seconds(20);
  return o;
}

// Clients that held the node's room for connections just left: the node sees their
// closes a moment later, and a worker that connects before that is still refused for
// want of room (unavailable). Retries until it is served, for up to 5 s.
void check_node_serves_once_room(const std::string& address, const std::string& job) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int attempt = 0;; ++attempt) {
    try {
      check_node_serves(address, fmt::format("{}-{}", job, attempt));
      return;
    } catch (const rw::error& e) {
      INFO(e.what());
      REQUIRE(e.code() == errc::unavailable);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

frame_header data_header(frame_kind kind, uint32_t job, uint32_t rank, uint32_t chunk,
                         uint64_t clock) {
  frame_header h;
  h.kind = kind;
  h.job_id = job;
  h.rank = rank;
  h.chunk_index = chunk;
  h.clock = clock;
  return h;
}

using testing::expect_error;

template <class Fn>
errc error_code_of(Fn fn) {
  try {
    fn();
  } catch (const rw::error& e) {
    return e.code();
  }
  return errc::ok;
}

// The code and message a call throws (errc::ok and "" if it does not).
template <class Fn>
std::pair<errc, std::string> error_code_and_message(Fn fn) {
  try {
    fn();
  } catch (const rw::error& e) {
    return {e.code(), e.what()};
  }
  return {errc::ok, {}};
}

} // namespace

TEST_CASE("a stream with the wrong magic is refused and closed", "[integration][bad]") {
  testing::node_process node;
  testing::raw_client c{node.address()};
  std::string junk(protocol::frame_header_bytes, 'G'); // e.g. an HTTP client
  c.send_bytes(junk.data(), junk.size());
  expect_error(c, errc::bad_magic);
  CHECK(c.closed_by_peer());
  CHECK(node.wait_for_log("malformed segment table"));
  check_node_serves(node.address(), "after-magic");
}

TEST_CASE("a frame of another protocol version is refused", "[integration][bad]") {
  testing::node_process node;
  testing::raw_client c{node.address()};
  alignas(8) std::byte head[protocol::frame_header_bytes];
  protocol::encode(data_header(frame_kind::pull, 1, 0, 0, 0), head);
  head[20] = std::byte{9}; // version 9
  c.send_bytes(head, sizeof(head));
  auto msg = expect_error(c, errc::bad_version);
  CHECK_THAT(msg, Catch::Contains("version 9"));
  CHECK(c.closed_by_peer());
  check_node_serves(node.address(), "after-version");
}

TEST_CASE("an oversized length is refused before anything is read",
          "[integration][bad]") {
  testing::node_process node{{"--max-chunk-bytes", "65536"}};
  testing::raw_client c{node.address()};
  auto id = c.join(small_job("big", 1), 0);
  auto h = data_header(frame_kind::push, id, 0, 0, 0);
  h.payload_bytes = 64u << 20;
  c.send_frame(h); // the header alone: the node must not wait for 64 MiB
  auto msg = expect_error(c, errc::frame_too_large);
  CHECK_THAT(msg, Catch::Contains("limit is 65536"));
  CHECK(c.closed_by_peer());
  check_node_serves(node.address(), "after-oversized");
}

TEST_CASE("a truncated frame is logged and the node keeps serving",
          "[integration][bad]") {
  testing::node_process node;
  {
    testing::raw_client c{node.address()};
    alignas(8) std::byte head[protocol::frame_header_bytes];
    protocol::encode(data_header(frame_kind::pull, 1, 0, 0, 0), head);
    c.send_bytes(head, 20);
  } // closes mid-header
  CHECK(node.wait_for_log("truncated frame: peer closed after 20 of 64 bytes"));
  check_node_serves(node.address(), "after-truncated");
}

TEST_CASE("a connection that says nothing, or trickles its hello, is closed in time",
          "[integration][bad]") {
  testing::node_process node{{"--first-frame-timeout-ms", "500"}};
  auto t0 = std::chrono::steady_clock::now();
  testing::raw_client silent{node.address()};
  testing::raw_client trickle{node.address()};
  alignas(8) std::byte head[protocol::frame_header_bytes];
  protocol::encode(data_header(frame_kind::hello, 0, 0, 0, 0), head);
  trickle.send_bytes(head, 10); // a header that never ends
  // A worker that says hello in time is served meanwhile, and after.
  testing::raw_client worker{node.address()};
  worker.join(small_job("in-time", 1), 0);
  auto cut = silent.read_frame(std::chrono::seconds(5));
  REQUIRE(cut);
  CHECK(cut->error().code == errc::timeout);
  CHECK_THAT(cut->error().message, Catch::Contains("no whole frame within 500 ms"));
  CHECK(trickle.closed_by_peer(std::chrono::seconds(5)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
  CHECK(node.wait_for_log("no whole frame within 500 ms of connecting"));
  // The joined worker was not cut: its connection still answers.
  worker.send_frame(data_header(frame_kind::pull, 999, 0, 0, 0));
  expect_error(worker, errc::unknown_job);
  check_node_serves(node.address(), "after-silent");
}

TEST_CASE("connections that have not said hello are capped per endpoint",
          "[integration][bad]") {
  // Every loopback address is one host: without a share per host, this one host may
  // take every slot (the share is the next case).
  testing::node_process node{
    {"--first-frame-timeout-ms", "20000", "--max-peer-strangers", "0"}};
  std::vector<std::unique_ptr<testing::raw_client>> quiet;
  for (uint32_t i = 0; i < defaults::max_stranger_connections; ++i)
    quiet.push_back(std::make_unique<testing::raw_client>(node.address()));
  // Accepted in the order they connected (the listen backlog is a queue): this one
  // comes after every quiet one.
  testing::raw_client one_too_many{node.address()};
  auto refused = one_too_many.read_frame(std::chrono::seconds(5));
  REQUIRE(refused);
  CHECK(refused->error().code == errc::unavailable);
  CHECK_THAT(refused->error().message, Catch::Contains("have not joined a job yet"));
  quiet.clear(); // they leave: room again, once the node has seen them go
  check_node_serves_once_room(node.address(), "after-cap");
}

// Issue 59: one host held every stranger slot of an endpoint (256), so no other host's
// worker could even say hello while it did.
TEST_CASE("one host holds at most its share of an endpoint's connections that have "
          "not joined",
          "[integration][bad][hostile]") {
  testing::node_process node{
    {"--first-frame-timeout-ms", "20000", "--max-peer-strangers", "8"}};
  // A worker joined before: joined connections are not strangers, and it stays served.
  testing::raw_client worker{node.address()};
  worker.join(small_job("share", 1), 0);
  std::vector<std::unique_ptr<testing::raw_client>> quiet;
  for (int i = 0; i < 8; ++i)
    quiet.push_back(std::make_unique<testing::raw_client>(node.address()));
  testing::raw_client one_too_many{node.address()};
  auto refused = one_too_many.read_frame(std::chrono::seconds(5));
  REQUIRE(refused);
  CHECK(refused->error().code == errc::unavailable);
  CHECK_THAT(refused->error().message,
             Catch::Contains("holds 8 connections to this endpoint that have not joined "
                             "a job (at most 8 per host, --max-peer-strangers)"));
  worker.send_frame(data_header(frame_kind::pull, 999, 0, 0, 0));
  expect_error(worker, errc::unknown_job);
  quiet.clear();
  check_node_serves_once_room(node.address(), "after-share");
}

TEST_CASE("connections from one host are capped per endpoint", "[integration][bad]") {
  testing::node_process node{{"--max-peer-connections", "3"}};
  std::vector<std::unique_ptr<testing::raw_client>> held;
  for (int i = 0; i < 3; ++i)
    held.push_back(std::make_unique<testing::raw_client>(node.address()));
  testing::raw_client one_too_many{node.address()};
  auto refused = one_too_many.read_frame(std::chrono::seconds(5));
  REQUIRE(refused);
  CHECK(refused->error().code == errc::unavailable);
  CHECK_THAT(refused->error().message,
             Catch::Contains("host loopback (127.0.0.0/8) holds 3 connections to this "
                             "endpoint already (at most 3, --max-peer-connections)"));
  CHECK(one_too_many.closed_by_peer());
  // One leaves: a new connection is served (the node sees the close first).
  held.pop_back();
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      testing::raw_client again{node.address()};
      again.join(small_job("after-cap", 1), 0);
      served = true;
    } catch (const rw::error& e) {
      REQUIRE(e.code() == errc::unavailable); // the close not seen yet
    } catch (const std::runtime_error&) {     // closed before an answer
    }
  }
  CHECK(served);
}

TEST_CASE("an open-jobs node caps the live jobs one host's hellos create",
          "[integration][bad]") {
  testing::node_process node{
    {"--max-open-jobs-per-peer", "2", "--rejoin-timeout-ms", "300"}};
  auto q1 = std::make_unique<testing::raw_client>(node.address());
  testing::raw_client q2{node.address()}, q3{node.address()};
  q1->join(small_job("q1", 1), 0);
  q2.join(small_job("q2", 1), 0);
  auto refusal = error_code_and_message([&] { q3.join(small_job("q3", 1), 0); });
  CHECK(refusal.first == errc::too_many_requests);
  CHECK_THAT(refusal.second, Catch::Contains("host 127.0.0.1 has created 2 live jobs")
                               && Catch::Contains("(at most 2, --max-open-jobs-per-peer)")
                               && Catch::Contains("q1") && Catch::Contains("q2"));
  CHECK_THAT(node.log(), Catch::Contains("hello refused: peer=127.0.0.1:")
                           && Catch::Contains("--max-open-jobs-per-peer"));
  // q1's worker goes for good: once its job has failed, the host may create one more.
  q1.reset();
  bool created = false;
  for (int i = 0; i < 50 && !created; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    testing::raw_client again{node.address()};
    created = error_code_and_message([&] { again.join(small_job("q3", 1), 0); }).first
              == errc::ok;
  }
  CHECK(created);
}

TEST_CASE("an open-jobs node bounds the memory all open jobs take together",
          "[integration][bad][hostile]") {
  // Hellos created 16 jobs per host, each up to --max-job-mib (half the RAM by
  // default): 4 x 200 MiB took the node from 23 to 824 MiB resident. Now every open
  // job together takes at most --max-open-jobs-mib.
  testing::node_process node{{"--max-open-jobs-mib", "3"}};
  // 500,000 floats (the sum optimizer: no state): 2 MB and its chunks' bookkeeping.
  auto one = std::make_unique<testing::raw_client>(node.address());
  one->join(small_job("mem-a", 1, 500'000), 0);
  testing::raw_client two{node.address()};
  auto refusal = error_code_and_message(
    [&] { two.join(small_job("mem-b", 1, 500'000), 0); });
  CHECK(refusal.first == errc::too_many_requests);
  CHECK_THAT(refusal.second,
             Catch::Contains("all open jobs may take (--max-open-jobs-mib)")
               && Catch::Contains("mem-a"));
  // A small one still fits beside it.
  testing::raw_client three{node.address()};
  CHECK(error_code_and_message([&] { three.join(small_job("mem-c", 1, 1000), 0); }).first
        == errc::ok);
}

TEST_CASE("data before hello, unknown jobs, bad chunks and bad ranks get errors",
          "[integration][bad]") {
  testing::node_process node;
  testing::raw_client c{node.address()};
  c.send_floats(data_header(frame_kind::push, 1, 0, 0, 0), std::vector<float>(1024));
  expect_error(c, errc::not_joined);
  // The connection stays usable: join now.
  auto id = c.join(small_job("ids", 2), 0);
  c.send_floats(data_header(frame_kind::push, id + 1000, 0, 0, 0),
                std::vector<float>(1024));
  CHECK_THAT(expect_error(c, errc::unknown_job), Catch::Contains("unknown job"));
  c.send_floats(data_header(frame_kind::push, id, 0, 9, 0), std::vector<float>(1024));
  CHECK_THAT(expect_error(c, errc::bad_chunk), Catch::Contains("chunk 9"));
  c.send_floats(data_header(frame_kind::push, id, 0, 2, 0), std::vector<float>(1024));
  CHECK_THAT(expect_error(c, errc::bad_chunk), Catch::Contains("holds 3808 bytes"));
  c.send_floats(data_header(frame_kind::push, id, 1, 0, 0), std::vector<float>(1024));
  expect_error(c, errc::bad_rank);
  c.send_frame(data_header(frame_kind::pull, id, 0, 0, 7));
  CHECK_THAT(expect_error(c, errc::clock_out_of_range), Catch::Contains("future"));

  // Server-side admission checks.
  testing::raw_client d{node.address()};
  CHECK_THROWS_WITH(d.join(small_job("ids", 2), 0), Catch::Contains("already held"));
  testing::raw_client e{node.address()};
  CHECK_THROWS_WITH(e.join(small_job("ids", 2), 5), Catch::Contains("outside 0..1"));
  CHECK(node.wait_for_log("frame refused"));
}

TEST_CASE("a worker whose job spec disagrees is refused with the difference",
          "[integration][bad]") {
  testing::node_process node;
  worker first{options(node.address(), small_job("spec", 2, 3000), 0)};
  CHECK(first.created_job());
  auto code = error_code_of(
    [&] { worker w{options(node.address(), small_job("spec", 2, 3001), 1)}; });
  CHECK(code == errc::spec_mismatch);
  try {
    auto s = small_job("spec", 2);
    s.optimizer.kind = optimizer_kind::adam;
    worker w{options(node.address(), s, 1)};
    FAIL("the mismatching worker was admitted");
  } catch (const rw::error& e) {
    CHECK_THAT(e.what(), Catch::Contains("optimizer sum"));
  }
  CHECK(node.wait_for_log("hello refused"));
}

TEST_CASE("a duplicate push is dropped, answered as the first was and counted once",
          "[integration][bad]") {
  testing::node_process node;
  auto spec = small_job("dup", 2, 1000); // one chunk
  testing::raw_client raw{node.address()};
  auto id = raw.join(spec, 0);
  std::vector<float> g0(1000, 1.0f);
  raw.send_floats(data_header(frame_kind::push, id, 0, 0, 0), g0);
  auto ack = raw.read_frame();
  REQUIRE(ack);
  CHECK(ack->header.kind == frame_kind::ack);
  std::vector<float> other(1000, 5.0f); // a re-send: whatever it carries is not added
  raw.send_floats(data_header(frame_kind::push, id, 0, 0, 0), other);
  auto again = raw.read_frame();
  REQUIRE(again);
  CHECK(again->header.kind == frame_kind::ack);
  CHECK(again->header.clock == 0);
  worker w{options(node.address(), spec, 1)};
  std::vector<float> g1(1000, 2.0f), out(1000);
  w.push_pull("t", g1.data(), out.data()).get();
  CHECK(out[0] == 3.0f); // 1 + 2: the duplicate was not added
  CHECK(out[999] == 3.0f);
}

TEST_CASE(
  "repeated pulls and subscribes cannot grow a chunk's waiting lists without bound",
  "[integration][bad]") {
  testing::node_process node;
  auto spec = small_job("greedy", 2, 1000); // one chunk; the step needs both ranks
  testing::raw_client raw{node.address()};
  auto id = raw.join(spec, 0);
  // Pulls for version 1 wait for the step: past 16 of them, each is refused.
  for (int i = 0; i < 20; ++i)
    raw.send_frame(data_header(frame_kind::pull, id, 0, 0, 1));
  for (int i = 0; i < 4; ++i)
    CHECK_THAT(
      expect_error(raw, errc::too_many_requests),
      Catch::Contains("16 pulls of chunk 0/0 from this connection wait already"));
  // Subscribing again on one connection starts its subscription over: one stream of
  // versions, not one per subscribe (each is answered with the current version).
  auto sub = data_header(frame_kind::pull, id, 0, 0, 0);
  sub.flags = protocol::flag_subscribe;
  for (int i = 0; i < 30; ++i)
    raw.send_frame(sub);
  std::vector<float> g0(1000, 1.0f);
  raw.send_floats(data_header(frame_kind::push, id, 0, 0, 0), g0);
  worker w{options(node.address(), spec, 1)};
  std::vector<float> g1(1000, 2.0f), out(1000);
  w.push_pull("t", g1.data(), out.data()).get();
  CHECK(out[0] == 3.0f);
  // What rank 0 gets: its push's ack, the 16 pulls answered with version 1, and the
  // subscription's versions: 0 for each subscribe, then version 1 once.
  int pulls_answered = 0, version_one_published = 0, acks = 0, errors = 0;
  for (int i = 0; i < 200; ++i) {
    auto f = raw.read_frame(std::chrono::milliseconds(500));
    if (!f)
      break;
    if (f->header.kind == frame_kind::ack)
      ++acks;
    else if (f->header.kind == frame_kind::error)
      ++errors;
    else if (f->header.kind == frame_kind::update
             && (f->header.flags & protocol::flag_subscribe))
      version_one_published += f->header.clock == 1 ? 1 : 0;
    else if (f->header.kind == frame_kind::update && f->header.clock == 1)
      ++pulls_answered;
  }
  CHECK(acks == 1);
  CHECK(errors == 0);
  CHECK(pulls_answered == 16);
  CHECK(version_one_published == 1);
}

TEST_CASE("a worker that disconnects mid-step and does not come back fails the step for "
          "the others, in bounded time",
          "[integration][bad]") {
  testing::node_process node{{"--rejoin-timeout-ms", "300"}};
  auto spec = small_job("midstep", 2, 4096); // four chunks
  worker w{options(node.address(), spec, 0)};
  std::vector<float> g(4096, 1.0f), out(4096);
  auto fut = w.push_pull("t", g.data(), out.data());
  {
    testing::raw_client raw{node.address()};
    auto id = raw.join(spec, 1);
    raw.send_floats(data_header(frame_kind::push, id, 1, 0, 0), std::vector<float>(1024));
  } // gone without bye, three chunks short
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto code = error_code_of([&] { fut.get(); });
  CHECK(code == errc::worker_left);
  CHECK(node.wait_for_log("disconnected mid-job"));
  CHECK(node.wait_for_log("did not join again within 300 ms"));
  check_node_serves(node.address(), "after-midstep");
}

TEST_CASE("a step whose worker never pushes times out", "[integration][bad]") {
  testing::node_process node{{"--step-timeout-ms", "300"}};
  auto spec = small_job("slow", 2);
  testing::raw_client idle{node.address()};
  worker w{options(node.address(), spec, 0)};
  idle.join(spec, 1); // joined, never pushes
  std::vector<float> g(3000, 1.0f), out(3000);
  auto fut = w.push_pull("t", g.data(), out.data());
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  try {
    fut.get();
    FAIL("the step completed without rank 1");
  } catch (const rw::error& e) {
    CHECK(e.code() == errc::step_timeout);
    CHECK_THAT(e.what(), Catch::Contains("ranks [1]"));
  }
  CHECK(node.wait_for_log("job failed"));
}

TEST_CASE("a busy port is a clear error at start", "[integration][bad]") {
  testing::node_process first;
  auto log = testing::temp_path("second.log");
  tools::subprocess second{{RW_NODE_PATH, "--listen", first.address()}, false, log};
  auto rc = second.wait_until(std::chrono::steady_clock::now()
                              + std::chrono::seconds(10));
  REQUIRE(rc.has_value());
  CHECK(*rc == 1);
  CHECK_THAT(testing::read_file(log), Catch::Contains("Address already in use"));
  std::remove(log.c_str());
}

TEST_CASE("workers fail fast when the node goes away", "[integration][bad]") {
  auto node = std::make_unique<testing::node_process>();
  worker w{options(node->address(), small_job("orphan", 2), 0)};
  std::vector<float> g(3000, 1.0f), out(3000);
  auto fut = w.push_pull("t", g.data(), out.data()); // waits for rank 1, forever
  node.reset();                                      // SIGTERM
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(error_code_of([&] { fut.get(); }) != errc::ok);
  CHECK(error_code_of([&] { worker x{options("127.0.0.1:1", small_job("x", 1), 0)}; })
        == errc::io_error);
}

TEST_CASE("misuse of the worker API throws at once with its own code",
          "[integration][bad]") {
  testing::node_process node;
  auto spec = small_job("misuse", 2);
  worker w{options(node.address(), spec, 1)};
  std::vector<float> buf(3000);
  CHECK(error_code_of([&] { w.push("nope", buf.data()); }) == errc::unknown_tensor);
  CHECK(error_code_of([&] { w.init("t", buf.data()); }) == errc::bad_rank);
  CHECK(w.clock("t") == 0);
  w.close();
  CHECK(error_code_of([&] { w.push("t", buf.data()); }) == errc::closed);
}

TEST_CASE("a job larger than the node allows is refused before any allocation",
          "[integration][bad]") {
  testing::node_process node{{"--max-job-mib", "1"}};
  auto spec = small_job("huge", 1, 1u << 20); // 4 MiB of parameters
  try {
    worker w{options(node.address(), spec, 0)};
    FAIL("the oversized job was admitted");
  } catch (const rw::error& e) {
    CHECK(e.code() == errc::invalid_spec);
    CHECK_THAT(e.what(), Catch::Contains("allows 1 MiB per job"));
  }
  check_node_serves(node.address(), "after-huge");
}

TEST_CASE("a job's per-chunk bookkeeping counts against the node's job memory limit",
          "[integration][bad]") {
  testing::node_process node{{"--max-job-mib", "4"}};
  // 256 KiB of parameters, but in 65536 chunks of one float: their bookkeeping on the
  // shard is far more than their floats.
  auto spec = small_job("tiny-chunks", 1, 1u << 16);
  spec.chunk_bytes = 4;
  try {
    worker w{options(node.address(), spec, 0)};
    FAIL("a job whose chunks' bookkeeping exceeds the limit was admitted");
  } catch (const rw::error& e) {
    CHECK(e.code() == errc::invalid_spec);
    CHECK_THAT(e.what(), Catch::Contains("per-chunk bookkeeping")
                           && Catch::Contains("allows 4 MiB per job"));
  }
  // The same floats in 4 KiB chunks fit.
  auto fits = small_job("big-chunks", 1, 1u << 16);
  worker w{options(node.address(), fits, 0)};
  std::vector<float> g(1u << 16, 1.0f), out(1u << 16);
  w.push_pull("t", g.data(), out.data()).get();
  CHECK(out[65535] == 1.0f);
}

TEST_CASE("shared memory is used on this host unless the node or the worker says no",
          "[integration][shm]") {
  {
    testing::node_process node;
    worker w{options(node.address(), small_job("shm-auto", 1), 0)};
    CHECK(std::string(w.transport()) == "shm");
    REQUIRE(w.shared_gradient("t") != nullptr);
    // Zero copies: the gradient is written in, and the result read from, the segment.
    std::fill(w.shared_gradient("t"), w.shared_gradient("t") + 3000, 0.5f);
    w.push_pull("t", w.shared_gradient("t"), nullptr).get();
    CHECK(w.shared_result("t")[2999] == 0.5f);
    auto o = options(node.address(), small_job("shm-off", 1), 0);
    o.transport = "tcp";
    worker t{o};
    CHECK(std::string(t.transport()) == "tcp");
    CHECK(t.shared_gradient("t") == nullptr);
    std::vector<float> g(3000);
    CHECK(error_code_of([&] { t.push_pull("t", g.data(), nullptr); })
          == errc::invalid_spec);
  }
  testing::node_process no_shm{{"--no-shm"}};
  auto o = options(no_shm.address(), small_job("shm-refused", 1), 0);
  worker fallback{o};
  CHECK(std::string(fallback.transport()) == "tcp");
  o.job.name = "shm-required";
  o.transport = "shm";
  CHECK(error_code_of([&] { worker w{o}; }) == errc::io_error);
  o.transport = "carrier-pigeon";
  CHECK(error_code_of([&] { worker w{o}; }) == errc::invalid_spec);
}

TEST_CASE("a sparse frame with an index out of range is refused and nothing applied",
          "[integration][bad][sparse]") {
  testing::node_process node;
  auto spec = small_job("sparse-raw", 1, 1000); // one chunk of 1000 elements
  testing::raw_client raw{node.address()};
  auto id = raw.join(spec, 0);
  protocol::sparse_pair pairs[2] = {{5, 1.0f}, {1000, 2.0f}};
  auto h = data_header(frame_kind::push_sparse, id, 0, 0, 0);
  h.flags = protocol::flag_want_result;
  h.payload_bytes = sizeof(pairs);
  raw.send_frame(h, pairs);
  CHECK_THAT(expect_error(raw, errc::bad_chunk), Catch::Contains("sparse index 1000"));
  h.payload_bytes = 12; // not whole pairs
  raw.send_frame(h, pairs);
  expect_error(raw, errc::bad_chunk);
  // Nothing was applied: the chunk is still at version 0 and zero.
  raw.send_frame(data_header(frame_kind::pull, id, 0, 0, 0));
  auto f = raw.read_frame();
  REQUIRE(f);
  REQUIRE(f->header.kind == frame_kind::update);
  CHECK(f->header.clock == 0);
  float first;
  std::memcpy(&first, f->payload.data() + 5 * sizeof(float), sizeof(float));
  CHECK(first == 0.0f);
}

TEST_CASE("a buffer of the wrong length is refused at the call, the right one works",
          "[integration][bad]") {
  testing::node_process node;
  worker w{options(node.address(), small_job("lengths", 1, 3000), 0)};
  std::vector<float> g(3000, 2.0f), out(3000), short_out(2999);
  std::vector<uint64_t> idx{1, 2};
  std::vector<float> vals{1.0f, 2.0f, 3.0f};
  auto code_and_text = [](auto fn) {
    try {
      fn();
    } catch (const rw::error& e) {
      return std::make_pair(e.code(), std::string{e.what()});
    }
    return std::make_pair(errc::ok, std::string{});
  };
  auto [code, text] = code_and_text([&] { w.push_pull("t", g, short_out); });
  CHECK(code == errc::bad_buffer);
  CHECK(text == "tensor 't': 2999 elements in the output, 3000 in the tensor");
  CHECK(code_and_text([&] {
          w.push("t", rw::const_floats{g.data(), 3001});
        }).first
        == errc::bad_buffer);
  CHECK(code_and_text([&] { w.pull("t", short_out, 0); }).first == errc::bad_buffer);
  auto sparse = code_and_text([&] { w.push_sparse("t", idx, vals); });
  CHECK(sparse.first == errc::bad_buffer);
  CHECK(sparse.second == "tensor 't': 3 elements in the sparse values, 2 in the indices");
  CHECK(code_and_text([&] { w.push("nope", g); }).first == errc::unknown_tensor);
  // Nothing was sent: the clock did not move, and the right lengths go through.
  CHECK(w.clock("t") == 0);
  w.push_pull("t", g, out).get();
  CHECK(out[0] == 2.0f);
  CHECK(out[2999] == 2.0f);
  CHECK(w.clock("t") == 1);
}

TEST_CASE("bad hyper frames get clear answers and change nothing", "[integration][bad]") {
  testing::node_process node;
  auto spec = small_job("hyper-bad", 2);
  testing::raw_client r0{node.address()};
  auto id = r0.join(spec, 0);
  testing::raw_client r1{node.address()};
  r1.join(spec, 1);
  frame_header h;
  h.kind = frame_kind::hyper;
  h.job_id = id;
  h.rank = 0;
  // Not a HyperChange.
  std::vector<std::byte> junk(24, std::byte{0x5a});
  h.payload_bytes = static_cast<uint32_t>(junk.size());
  r0.send_frame(h, junk.data());
  auto a = r0.read_frame();
  REQUIRE(a);
  CHECK(a->header.kind == frame_kind::hyper);
  CHECK(a->header.error_code == errc::bad_frame);
  // A valid change from rank 1.
  hyper_change c;
  c.at_clock = 3;
  c.learning_rate = 0.5f;
  auto payload = protocol::encode(c);
  frame_header h1 = h;
  h1.rank = 1;
  h1.payload_bytes = static_cast<uint32_t>(payload.size());
  r1.send_frame(h1, payload.data());
  auto b = r1.read_frame();
  REQUIRE(b);
  CHECK(b->header.kind == frame_kind::hyper);
  CHECK(b->header.error_code == errc::bad_rank);
  // No field to change.
  hyper_change none;
  none.at_clock = 3;
  auto empty = protocol::encode(none);
  h.payload_bytes = static_cast<uint32_t>(empty.size());
  r0.send_frame(h, empty.data());
  auto e = r0.read_frame();
  REQUIRE(e);
  CHECK(e->header.error_code == errc::invalid_spec);
  // A hyper frame before joining is refused like any data frame.
  testing::raw_client stranger{node.address()};
  stranger.send_frame(h, empty.data());
  auto s = stranger.read_frame();
  REQUIRE(s);
  CHECK(s->header.kind == frame_kind::error);
  CHECK(s->header.error_code == errc::not_joined);
  check_node_serves(node.address(), "after-hyper-bad");
}

} // namespace rw_integration_bad_input
