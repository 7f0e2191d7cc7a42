// Eager notification: per-chunk readiness, and subscriptions that receive each new
// version without asking, over each transport.

#include <condition_variable>
#include <future>
#include <mutex>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"

namespace rw_integration_eager {

using namespace rw;

namespace {

worker_options options(const std::string& address, const std::string& job, uint32_t rank,
                       const std::string& transport) {
  return testing::job_options(address, job, rank, transport, 3000);
}

} // namespace

TEST_CASE("subscribers get every new version without asking, and chunks report readiness",
          "[integration][eager]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    DYNAMIC_SECTION(transport) {
      auto job = "eager-" + transport;
      worker a{options(node.address(), job, 0, transport)};
      worker b{options(node.address(), job, 1, transport)};
      std::mutex mtx;
      std::condition_variable cv;
      std::vector<uint64_t> seen;
      std::vector<float> mirror(3000, -1.0f);
      a.subscribe("t", mirror.data(),
                  [&](uint64_t v) {
                    std::lock_guard<std::mutex> guard{mtx};
                    seen.push_back(v);
                    cv.notify_all();
                  })
        .get();
      CHECK(a.chunk_count("t") == 3);
      CHECK(a.chunk_offset("t", 2) == 2048);
      CHECK(a.chunk_length("t", 2) == 3000 - 2048);
      std::vector<float> ga(3000), gb(3000), out(3000);
      for (int step = 1; step <= 3; ++step) {
        std::fill(ga.begin(), ga.end(), float(step));
        std::fill(gb.begin(), gb.end(), 10.0f * step);
        auto fa = a.push_pull("t", ga.data(), out.data());
        auto fb = b.push_pull("t", gb.data(), out.data());
        fa.get();
        fb.get();
        for (uint32_t c = 0; c < 3; ++c)
          CHECK(a.chunk_ready("t", c));
      }
      std::unique_lock<std::mutex> lock{mtx};
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return !seen.empty() && seen.back() == 3; }));
      // Versions arrive in order (0, the initial value, may or may not be seen first).
      for (size_t i = 1; i < seen.size(); ++i)
        CHECK(seen[i] > seen[i - 1]);
      CHECK(mirror[0] == 33.0f); // version 3: 3 + 30
      CHECK(mirror[2999] == 33.0f);
    }
  }
}

} // namespace rw_integration_eager
