// Bad input on the fabric path, each a clear error while the node serves everyone else:
// a fabric offer before the welcome, one that does not decode, one for a provider the
// node does not run, one too large, and a node without --fabric. (Immediates naming no
// slot, writes into held slots, a peer that stops giving slots back: unit/test_fabric; a
// worker killed mid-step over fabric: test_worker_restart.)

#include <filesystem>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/expect_error.hpp"
#include "tests/support/raw_client.hpp"
#include "protocol/control.hpp"

namespace rw_integration_fabric_bad_input {

using namespace rw;
using protocol::frame_header;
using protocol::frame_kind;

namespace {

job_spec small_job(const std::string& name, uint32_t workers) {
  job_spec s;
  s.name = name;
  s.num_workers = workers;
  s.chunk_bytes = 4096;
  s.tensors = {{"t", 3000, false}};
  return s;
}

frame_header fabric_frame(uint32_t job, uint32_t bytes) {
  frame_header h;
  h.kind = frame_kind::fabric;
  h.job_id = job;
  h.payload_bytes = bytes;
  return h;
}

void check_serves(const std::string& address, const std::string& job,
                  const std::string& transport) {
  rw::worker w{testing::job_options(address, job, 0, transport, 3000, 1)};
  CHECK(std::string(w.transport()) == transport);
  std::vector<float> g(3000, 2.0f), out(3000, 0.0f);
  w.push_pull("t", g.data(), out.data()).get();
  CHECK(out[0] == 2.0f);
  CHECK(out[2999] == 2.0f);
}

} // namespace

using testing::expect_error;

TEST_CASE("fabric: bad offers get clear errors and the node serves on",
          "[integration][fabric]") {
  testing::node_process node{testing::fabric_node_args()};
  CHECK(node.wait_for_log("fabric: fabric://tcp;ofi_rxm"));

  SECTION("an offer before the welcome") {
    testing::raw_client c{node.address()};
    std::vector<std::byte> junk(16);
    c.send_frame(fabric_frame(1, 16), junk.data());
    CHECK_THAT(expect_error(c, errc::not_joined), Catch::Contains("before the welcome"));
  }
  SECTION("an offer that does not decode, then one of another provider") {
    testing::raw_client c{node.address()};
    auto job = c.join(small_job("fab-bad", 2), 0);
    std::vector<std::byte> junk(64, std::byte{0x41});
    c.send_frame(fabric_frame(job, 64), junk.data());
    expect_error(c, errc::bad_frame);
    protocol::fabric_offer o;
    o.provider = "verbs";
    o.address.assign(16, std::byte{1});
    o.slot_bytes = 8192;
    o.slot_count = 4;
    auto bytes = protocol::encode(o);
    c.send_frame(fabric_frame(job, static_cast<uint32_t>(bytes.size())), bytes.data());
    CHECK_THAT(expect_error(c, errc::unavailable), Catch::Contains("provider 'verbs'"));
  }
  SECTION("an offer far too large") {
    testing::raw_client c{node.address()};
    auto job = c.join(small_job("fab-big", 2), 0);
    c.send_frame(fabric_frame(job, 1u << 20));
    expect_error(c, errc::bad_frame);
  }
  check_serves(node.address(), "fab-after", "fabric");
}

TEST_CASE("fabric: a node without --fabric says so, and serves over TCP",
          "[integration][fabric]") {
  testing::node_process node;
  try {
    rw::worker w{testing::job_options(node.address(), "fab-none", 0, "fabric", 3000, 1)};
    FAIL("transport fabric joined a node without --fabric");
  } catch (const rw::error& e) {
    CHECK(e.code() == errc::unavailable);
    CHECK_THAT(e.what(), Catch::Contains("offers no fabric endpoint"));
  }
  check_serves(node.address(), "fab-tcp", "tcp");
}

TEST_CASE("fabric: a node asked for a provider this machine lacks says so and exits",
          "[integration][fabric]") {
  std::error_code ec;
  std::filesystem::directory_iterator rdma{"/sys/class/infiniband", ec};
  if (!ec && rdma != std::filesystem::directory_iterator{}) {
    WARN("this machine has RDMA devices: verbs may well open here; not checked");
    return;
  }
  auto stopped = testing::node_that_stops({"--fabric", "verbs"});
  REQUIRE(stopped.code.has_value());
  CHECK(*stopped.code == 1);
  CHECK_THAT(stopped.log,
             Catch::Contains("no libfabric provider 'verbs' on this machine"));
  CHECK_THAT(stopped.log, Catch::Contains("--fabric off"));
}

} // namespace rw_integration_fabric_bad_input
