// Sparse pushes and pulls of changes, over each transport.

#include <future>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"

namespace rw_integration_sparse_delta {

using namespace rw;

namespace {

worker_options options(const std::string& address, const std::string& job, uint32_t rank,
                       const std::string& transport) {
  return testing::job_options(address, job, rank, transport, 5000);
}

} // namespace

TEST_CASE(
  "dense and sparse pushes combine exactly, and pulls of changes send only changes",
  "[integration][sparse]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    DYNAMIC_SECTION(transport) {
      auto job = "sparse-" + transport;
      worker dense_worker{options(node.address(), job, 0, transport)};
      worker sparse_worker{options(node.address(), job, 1, transport)};
      REQUIRE(std::string(sparse_worker.transport()) == transport);
      std::vector<float> g(5000, 1.0f), out0(5000), out1(5000, -7.0f);
      // Repeated indices add up; chunks 1..3 get nothing from rank 1 (zero).
      std::vector<uint64_t> idx{3, 3, 4500, 4999};
      std::vector<float> val{2.0f, 0.5f, -1.0f, 0.25f};
      auto f0 = dense_worker.push_pull("t", g.data(), out0.data());
      auto f1 = sparse_worker.push_pull_sparse("t", idx.data(), val.data(), idx.size(),
                                               out1.data());
      f0.get();
      f1.get();
      for (auto* out : {&out0, &out1}) {
        CHECK((*out)[0] == 1.0f);
        CHECK((*out)[3] == 3.5f);
        CHECK((*out)[2048] == 1.0f);
        CHECK((*out)[4500] == 0.0f);
        CHECK((*out)[4999] == 1.25f);
      }
      // An index out of range throws before anything is sent.
      uint64_t bad = 5000;
      float one = 1.0f;
      CHECK_THROWS_AS(sparse_worker.push_sparse("t", &bad, &one, 1), rw::error);
      // Version 1 everywhere: changes since 0 are all 5 chunks, since 1 none.
      std::vector<float> mirror(5000, -1.0f);
      sparse_worker.pull_changed("t", mirror.data(), 0).get();
      CHECK(sparse_worker.last_changed("t") == 5);
      CHECK(mirror[3] == 3.5f);
      std::fill(mirror.begin(), mirror.end(), -1.0f);
      sparse_worker.pull_changed("t", mirror.data(), 1).get();
      CHECK(sparse_worker.last_changed("t") == 0);
      CHECK(mirror[3] == -1.0f); // untouched: nothing was sent
      auto future = sparse_worker.pull_changed("t", mirror.data(), 9);
      try {
        future.get();
        FAIL("a version from the future was served");
      } catch (const rw::error& e) {
        CHECK(e.code() == errc::clock_out_of_range);
      }
    }
  }
}

// (A sparse frame with an index out of range is refused whole: test_bad_input.)
TEST_CASE("an empty sparse push is a valid zero contribution", "[integration][sparse]") {
  testing::node_process node;
  worker a{options(node.address(), "sparse-empty", 0, "tcp")};
  worker b{options(node.address(), "sparse-empty", 1, "tcp")};
  std::vector<float> g(5000, 2.0f), out(5000);
  auto fa = a.push_pull("t", g.data(), out.data());
  auto fb = b.push_pull_sparse("t", nullptr, nullptr, 0, out.data());
  fa.get();
  fb.get();
  CHECK(out[4999] == 2.0f);
}

} // namespace rw_integration_sparse_delta
