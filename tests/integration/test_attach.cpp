// A node with several endpoints: a worker says hello at one and attaches to the
// others, proving its rank there with an HMAC (runtime::prove_attach) bound to its
// newest welcome, never sending a secret. Wrong, missing and replayed proofs are
// refused; the attach path carries real data.

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "runtime/credentials.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/expect_error.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_attach {

using namespace rw;

namespace {

job_spec two_chunk_job(const std::string& name) {
  job_spec s;
  s.name = name;
  s.num_workers = 1;
  s.chunk_bytes = 4096;
  s.tensors = {{"t", 64 * 1024, false}}; // 64 chunks over both shards, both endpoints
  return s;
}

// A node with two --listen endpoints and two shards, each endpoint serving one.
testing::node_process two_endpoint_node() {
  return testing::node_process{{"--listen", "127.0.0.1:0", "--shards", "2"}};
}

// One worker alone in `job` (two_chunk_job) over TCP (on this host it would take shared
// memory, which needs no attach): three steps, each result its own gradient (optimizer
// sum), values i % modulus.
void three_steps_alone(const std::string& address, const std::string& job, int modulus) {
  worker_options o;
  o.connect = address;
  o.job = two_chunk_job(job);
  o.transport = "tcp";
  worker w{o};
  std::vector<float> g(64 * 1024), out(64 * 1024);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = static_cast<float>(i % modulus);
  for (int step = 0; step < 3; ++step) {
    w.push_pull("t", g.data(), out.data()).get();
    REQUIRE(out == g);
  }
}

} // namespace

TEST_CASE("a worker attaches to a node's every endpoint and its chunks travel on each",
          "[integration][attach]") {
  auto node = two_endpoint_node();
  three_steps_alone(node.address(), "both-endpoints", 97);
  auto log = node.log();
  CHECK_THAT(log, Catch::Contains("worker attached: job='both-endpoints'"));
  CHECK_THAT(log, !Catch::Contains("attach refused"));
}

TEST_CASE("three pollers: one address, three endpoints, a worker's chunks on all three",
          "[integration][attach]") {
  // One --listen address (node_process's) with three pollers and two shards.
  testing::node_process node{{"--pollers", "3", "--shards", "2"}};
  CHECK(node.wait_for_log("pollers: 3 per --listen address (--pollers 3)"));
  auto log = node.log();
  for (auto* line : {"endpoint 0: tcp://127.0.0.1:", "endpoint 1: tcp://127.0.0.1:",
                     "endpoint 2: tcp://127.0.0.1:"})
    CHECK_THAT(log, Catch::Contains(line));
  three_steps_alone(node.address(), "three-pollers", 89);
  log = node.log();
  // Hello at the first endpoint, an attach at each of the two others.
  size_t attached = 0;
  for (auto at = log.find("worker attached: job='three-pollers'");
       at != std::string::npos;
       at = log.find("worker attached: job='three-pollers'", at + 1))
    ++attached;
  CHECK(attached == 2);
}

TEST_CASE("an attach with a wrong, missing or replayed proof is refused",
          "[integration][attach][bad]") {
  auto node = two_endpoint_node();
  auto spec = two_chunk_job("proved");
  testing::raw_client first{node.address()};
  auto welcome = first.join_welcome(spec, 0);
  REQUIRE(welcome.endpoints.size() == 2);
  auto other = welcome.endpoints[1 - welcome.endpoint_index];

  protocol::attach_msg good;
  good.nonce = runtime::make_nonce();
  good.mac = runtime::prove_attach("", welcome.token, good.nonce, spec.name, 0);

  SECTION("the old clear token, or no proof at all") {
    testing::raw_client c{other};
    protocol::frame_header h;
    h.kind = protocol::frame_kind::attach;
    h.job_id = welcome.job_id;
    h.clock = welcome.token; // wire protocol 2 sent the token itself
    c.send_frame(h);
    CHECK_THAT(testing::expect_error(c, errc::unauthorized),
               Catch::Contains("an attach carries an AttachProof"));
  }
  SECTION("a proof keyed by something else") {
    testing::raw_client c{other};
    auto bad = good;
    bad.mac = runtime::prove_attach("", welcome.token + 1, good.nonce, spec.name, 0);
    c.send_attach(welcome.job_id, 0, bad);
    CHECK_THAT(testing::expect_error(c, errc::unauthorized),
               Catch::Contains("does not match"));
    CHECK_THAT(node.log(), Catch::Contains("attach refused: peer=")
                             && Catch::Contains("wrong proof"));
  }
  SECTION("a good proof is taken once; the same bytes again are a replay") {
    testing::raw_client c{other};
    c.send_attach(welcome.job_id, 0, good);
    auto f = c.read_frame();
    REQUIRE(f);
    CHECK(f->header.kind == protocol::frame_kind::welcome);
    testing::raw_client replay{other};
    replay.send_attach(welcome.job_id, 0, good);
    CHECK_THAT(testing::expect_error(replay, errc::unauthorized),
               Catch::Contains("was used already"));
  }
  SECTION("a rank that is not live") {
    testing::raw_client c{other};
    c.send_attach(welcome.job_id, 3, good);
    testing::expect_error(c, errc::bad_rank);
  }
}

TEST_CASE("a job with a token: the attach proof is keyed by it",
          "[integration][attach][bad]") {
  // Token jobs are made through the cluster; the key is the token, so a proof made with
  // the welcome's attach token alone (what an eavesdropper of the welcome knows) fails.
  auto node = two_endpoint_node();
  auto run = testing::run_shell({"--connect", node.address(), "-c",
                                 "local j = rw.job_create{name = 'tok', workers = 1, "
                                 "chunk_bytes = '4KiB'}; print(j.token)"});
  INFO(run.err);
  REQUIRE(run.code == 0);
  auto token = run.out.substr(0, run.out.find('\n'));
  auto spec = two_chunk_job("tok");
  testing::raw_client first{node.address()};
  auto welcome = first.join_welcome(spec, 0, token);
  // The shell created the job: its first worker's welcome does not say it did
  // (worker::created_job() is false).
  CHECK_FALSE(welcome.created);
  auto other = welcome.endpoints[1 - welcome.endpoint_index];
  protocol::attach_msg eavesdropped;
  eavesdropped.nonce = runtime::make_nonce();
  eavesdropped.mac = runtime::prove_attach("", welcome.token, eavesdropped.nonce, "tok",
                                           0);
  testing::raw_client c{other};
  c.send_attach(welcome.job_id, 0, eavesdropped);
  testing::expect_error(c, errc::unauthorized);
  protocol::attach_msg proved;
  proved.nonce = runtime::make_nonce();
  proved.mac = runtime::prove_attach(token, welcome.token, proved.nonce, "tok", 0);
  testing::raw_client d{other};
  d.send_attach(welcome.job_id, 0, proved);
  auto f = d.read_frame();
  REQUIRE(f);
  CHECK(f->header.kind == protocol::frame_kind::welcome);
}

} // namespace rw_integration_attach
