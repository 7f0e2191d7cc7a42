// The rate probe behind reduction = "auto", on 127.0.0.1: two rack-aggs with no rates
// configured get an auto job planned from a probed core rate (within a bounded time,
// and probed once for several jobs); a probe the other node does not answer falls
// back to equal links, saying so, and the job is still created; probe frames a node
// must not take (oversized, too many bytes, too many at once, mixed with a worker's
// frames) are refused and the node keeps serving.

#include <csignal>
#include <future>
#include <regex>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "services/rate_probe.hpp"
#include "tests/support/cluster_fixture.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_rate_probe {

using namespace rw;
using protocol::frame_header;
using protocol::frame_kind;

namespace {

// A --role coordinator and rack-aggs n0 (rack a) and n1 (rack b), no rates given.
struct two_racks {
  two_racks()
    : coordinator({"--name", "coord"}, {"coordinator", false, {}}),
      n0({"--name", "n0", "--rack", "a"}, {"rack-agg", false, coordinator.address()}),
      n1({"--name", "n1", "--rack", "b"}, {"rack-agg", false, coordinator.address()}) {
    if (!coordinator.wait_for_log("2 node(s) live", std::chrono::seconds(15)))
      throw std::runtime_error("the nodes did not join; the coordinator's log:\n"
                               + coordinator.log());
  }

  // Creates an auto job of 4 workers over racks a and b; prints its reduction and plan.
  testing::shell_run create(const std::string& name) {
    return testing::run_shell({"--connect", coordinator.address(), "-c",
                               "local j = rw.job_create{name = '" + name
                                 + "', workers = 4, racks = {'a', 'b'}}; "
                                   "print(j.reduction); print(j.plan)"});
  }

  testing::node_process coordinator;
  testing::node_process n0;
  testing::node_process n1;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

frame_header probe_header(uint32_t payload, uint16_t flags = 0) {
  frame_header h;
  h.kind = frame_kind::probe;
  h.payload_bytes = payload;
  h.flags = flags;
  return h;
}

// Expects an error frame with `code`, then the node closing the connection.
void expect_refused(testing::raw_client& c, errc code, const std::string& says) {
  auto f = c.read_frame();
  REQUIRE(f.has_value());
  REQUIRE(f->header.kind == frame_kind::error);
  CHECK(f->header.error_code == code);
  CHECK_THAT(f->error().message, Catch::Contains(says));
  CHECK(c.closed_by_peer());
}

// A fresh single-worker job runs to completion on the (open-jobs) node at `address`.
void check_serves_workers(const std::string& address) {
  worker_options o;
  o.connect = address;
  o.job.name = "after-probes";
  o.job.num_workers = 1;
  o.job.chunk_bytes = 4096;
  o.job.tensors = {{"t", 3000, false}};
  o.request_timeout = std::chrono::seconds(20);
  worker w{o};
  std::vector<float> g(3000, 2.0f), out(3000, 0.0f);
  w.push_pull("t", g.data(), out.data()).get();
  CHECK(out[2999] == 2.0f);
}

} // namespace

TEST_CASE("auto over two racks with no rates plans from a probed core rate",
          "[integration][racks][probe]") {
  two_racks c;
  auto start = std::chrono::steady_clock::now();
  auto r = c.create("probed-1");
  auto took = std::chrono::steady_clock::now() - start;
  INFO(r.err << c.coordinator.log());
  REQUIRE(r.code == 0);
  // Bounded: the probe's own limit, its report's, and the grant's, with room to spare.
  CHECK(took < std::chrono::seconds(8));
  // Equal links (the racks' links count as fast as the probed core): flat.
  CHECK_THAT(r.out, Catch::StartsWith("flat\nauto: flat; link-bound time per GiB"));
  std::smatch m;
  REQUIRE(
    std::regex_search(r.out, m,
                      std::regex{R"(core links ([0-9.e+]+) Gbit/s \(probed n0->n1 in )"
                                 R"([0-9]+ ms\))"}));
  CHECK(std::stod(m[1]) > 0);
  CHECK_THAT(r.out, Catch::Contains("agg links " + m[1].str()
                                    + " Gbit/s (not configured, "
                                      "no NIC speed: assumed as fast as the core link)"));
  // The coordinator logs the probe and the plan with the job's name; the prober logs
  // its measurement, and the probed node took the bytes.
  CHECK(c.coordinator.wait_for_log("rate probe: n0->n1 "));
  CHECK_THAT(c.coordinator.log(), Catch::Contains("(for job='probed-1')"));
  CHECK(c.coordinator.wait_for_log("job placed: job='probed-1'"));
  CHECK_THAT(c.coordinator.log(), Catch::Contains("(probed n0->n1 in "));
  CHECK(c.n0.wait_for_log("rate probe: from node=n0 to node=n1 at " + c.n1.address()));
  CHECK(c.n1.wait_for_log("rate probe answered: peer="));
  auto status = testing::run_shell({"--connect", c.coordinator.address(), "-c",
                                    "print(rw.job_status('probed-1').plan)"});
  CHECK_THAT(status.out, Catch::Contains("(probed n0->n1 in "));
  // A second job within the cache's lifetime reuses the measurement.
  auto again = c.create("probed-2");
  INFO(again.err);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.out, Catch::Contains("(probed n0->n1 in "));
  CHECK(count(c.coordinator.log(), "rate probe: n0->n1 ") == 1);
}

TEST_CASE("a probe the other node does not answer falls back, and the job is created",
          "[integration][racks][probe]") {
  two_racks c;
  // n1 stops answering anything: the probe's bytes go unacknowledged. Once the
  // coordinator has the failure (the probe's bounded time), n1 resumes and takes the
  // grant, which the coordinator sends it then.
  c.n1.process().signal(SIGSTOP);
  struct resume {
    testing::node_process& n;
    ~resume() { n.process().signal(SIGCONT); }
  } guard{c.n1};
  auto start = std::chrono::steady_clock::now();
  auto pending = std::async(std::launch::async, [&] { return c.create("fallback"); });
  bool failed = c.coordinator.wait_for_log("rate probe: n0->n1 failed",
                                           std::chrono::seconds(10));
  c.n1.process().signal(SIGCONT);
  REQUIRE(failed);
  auto r = pending.get();
  auto took = std::chrono::steady_clock::now() - start;
  INFO(r.err << c.coordinator.log());
  REQUIRE(r.code == 0);
  CHECK(took < std::chrono::seconds(10));
  CHECK_THAT(r.out, Catch::StartsWith("flat\nauto: flat"));
  CHECK_THAT(r.out, Catch::Contains("core links 1 Gbit/s (not configured or measured: as "
                                    "the agg links; the probe n0->n1 failed: "));
  CHECK(std::regex_search(r.out, std::regex{"did not (take|acknowledge) the probe"}));
  CHECK_THAT(c.coordinator.log(), Catch::Contains("job created: job='fallback'"));
}

TEST_CASE("probe frames a node must not take are refused, and it keeps serving",
          "[integration][probe]") {
  testing::node_process node;
  std::string logged = "rate probe refused: peer=";
  SECTION("a probe frame over the frame limit") {
    testing::raw_client c{node.address()};
    c.send_frame(probe_header(defaults::probe_frame_bytes + 1));
    expect_refused(c, errc::frame_too_large, "a probe frame of");
  }
  SECTION("a probe frame over the control payload limit") {
    testing::raw_client c{node.address()};
    c.send_frame(probe_header(defaults::max_control_bytes + 1));
    expect_refused(c, errc::frame_too_large, "the limit is");
    logged = "probe frame announces";
  }
  SECTION("more probe bytes than a connection may carry") {
    testing::raw_client c{node.address()};
    // The node charges each frame's header too: frames that charge probe_frame_bytes
    // each reach the bound exactly, and the refusal comes on the one-byte frame after
    // them. (Full-size frames crossed it on the 64th, and the node's close could fail
    // the test's write of that frame's payload before the refusal was read.)
    const uint32_t payload = defaults::probe_frame_bytes - protocol::frame_header_bytes;
    std::vector<std::byte> chunk(payload);
    for (uint32_t charged = 0; charged < defaults::probe_max_bytes;
         charged += defaults::probe_frame_bytes)
      c.send_frame(probe_header(payload), chunk.data());
    c.send_frame(probe_header(1, protocol::flag_want_result), chunk.data());
    expect_refused(c, errc::frame_too_large, "more than");
  }
  SECTION("too many probes at once") {
    std::vector<std::unique_ptr<testing::raw_client>> held;
    std::byte one[1] = {};
    for (uint32_t i = 0; i < defaults::probe_max_connections; ++i) {
      held.push_back(std::make_unique<testing::raw_client>(node.address()));
      held.back()->send_frame(probe_header(1, protocol::flag_want_result), one);
      auto ack = held.back()->read_frame(); // taken: the node counts it as under way
      REQUIRE(ack.has_value());
      CHECK(ack->header.kind == frame_kind::ack);
      CHECK(ack->header.clock == 1);
    }
    testing::raw_client extra{node.address()};
    extra.send_frame(probe_header(1), one);
    expect_refused(extra, errc::unavailable, "rate probes already");
    held.clear(); // the node counts them ended once it sees them closed
    auto log = [&] { return node.log(); };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (count(log(), "rate probe ended") < defaults::probe_max_connections
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(count(log(), "rate probe ended") == defaults::probe_max_connections);
  }
  SECTION("a worker's frame on a probe's connection") {
    testing::raw_client c{node.address()};
    std::byte one[1] = {};
    c.send_frame(probe_header(1), one);
    frame_header pull;
    pull.kind = frame_kind::pull;
    c.send_frame(pull);
    auto f = c.read_frame();
    REQUIRE(f.has_value());
    CHECK(f->header.kind == frame_kind::error);
    CHECK_THAT(f->error().message, Catch::Contains("on a rate probe's connection"));
    logged = "a pull frame on a rate probe's connection";
  }
  CHECK(node.wait_for_log(logged)); // operators see every refusal
  // Still serving: a whole probe measures, and a worker runs.
  auto m = services::probe_rate(node.address());
  INFO(m.error);
  CHECK(m.ok);
  CHECK(m.bytes > 0);
  CHECK(m.bytes <= defaults::probe_bytes);
  CHECK(m.gbps > 0);
  check_serves_workers(node.address());
  // Where nothing listens, the probe fails at once, saying so.
  auto nobody = services::probe_rate("127.0.0.1:1");
  CHECK_FALSE(nobody.ok);
  CHECK_THAT(nobody.error, Catch::Contains("cannot connect to 127.0.0.1:1"));
}

} // namespace rw_integration_rate_probe
