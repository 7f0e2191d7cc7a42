// Joining with the job's name and token alone (worker_options::spec_from_job), in C++:
// the node sends the spec. A flat job over two racks' nodes, created through the
// coordinator without tensors: rank 0 declares them at node a, rank 1 states nothing
// at node b; both get the whole spec, join every node of the job and sum exactly.

#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_join_by_name {

using namespace rw;

TEST_CASE("workers join a two-node job with its name and token alone",
          "[integration][racks][join]") {
  testing::rack_cluster c{{"a", "b"}};
  std::string err;
  auto token = c.create("by-name", 2, "sum", "racks = {'a', 'b'}, reduction = 'flat'",
                        &err);
  INFO(err);
  REQUIRE(!token.empty());
  constexpr uint64_t n = 10000; // about ten 4 KiB chunks, over both nodes
  auto options = [&](uint32_t rank, const std::string& address) {
    worker_options o;
    o.connect = address;
    o.job.name = "by-name";
    o.spec_from_job = true;
    o.rank = rank;
    o.token = token;
    o.request_timeout = std::chrono::seconds(20);
    return o;
  };
  auto first = options(0, c.nodes[0]->address());
  first.job.tensors = {{"w", n, false}};
  worker w0{first};
  worker w1{options(1, c.nodes[1]->address())};
  for (auto* w : {&w0, &w1}) {
    auto& s = w->spec();
    CHECK(s.num_workers == 2);
    CHECK(s.chunk_bytes == 4096);
    CHECK(s.optimizer.kind == optimizer_kind::sum);
    REQUIRE(s.tensors.size() == 1);
    CHECK(s.tensors[0].name == "w");
    CHECK(s.tensors[0].elements == n);
  }
  CHECK(w0.chunk_count("w") == w1.chunk_count("w"));
  CHECK(w0.chunk_count("w") > 1);

  std::vector<float> g0(n), g1(n), out0(n), out1(n);
  for (uint64_t i = 0; i < n; ++i) {
    g0[i] = 0.25f * static_cast<float>(i % 97);
    g1[i] = -1.5f + static_cast<float>(i % 13);
  }
  std::thread t{[&] { w1.push_pull("w", g1.data(), out1.data()).get(); }};
  w0.push_pull("w", g0.data(), out0.data()).get();
  t.join();
  for (uint64_t i = 0; i < n; ++i) {
    REQUIRE(out0[i] == g0[i] + g1[i]);
    REQUIRE(out1[i] == out0[i]);
  }

  // A stated spec is still checked; a worker that declares other tensors is refused.
  auto other = options(1, c.nodes[0]->address());
  other.job.tensors = {{"w", n + 1, false}};
  w1.close();
  try {
    worker bad{other};
    FAIL("a mismatching declaration was admitted");
  } catch (const error& e) {
    CHECK(e.code() == errc::spec_mismatch);
  }
}

} // namespace rw_integration_join_by_name
