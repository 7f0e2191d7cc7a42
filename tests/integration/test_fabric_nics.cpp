// A node with a fabric endpoint per NIC (--fabric-nics): workers spread over the NICs,
// each NIC's endpoint with its own pool and poller, results verified; a NIC the
// provider lacks stops the node with the NICs it has; libfabric loaded only where used.

#include <functional>
#include <thread>

#include <catch2/catch.hpp>

#include "rackweave/worker.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"
#include "transports/fabric/domain.hpp"

namespace rw_integration_fabric_nics {

using namespace rw;

namespace {
size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}
// `workers` ranks of job `job` over fabric, each on its own thread, `steps` push_pulls
// of `n` floats (rank r's gradient element i at step k: grad(r, i, k)); each rank's
// last result in outs[r]. Returns each rank's error ("" for none).
std::vector<std::string> train_over_fabric(
  const std::string& address, const std::string& job, uint32_t workers, uint32_t n,
  int steps, const std::function<float(uint32_t, uint32_t, int)>& grad,
  std::vector<std::vector<float>>& outs) {
  outs.assign(workers, std::vector<float>(n, 0.0f));
  std::vector<std::string> errors(workers);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < workers; ++r)
    ranks.emplace_back([&, r] {
      try {
        rw::worker w{testing::job_options(address, job, r, "fabric", n, workers)};
        std::vector<float> g(n);
        for (int step = 0; step < steps; ++step) {
          for (uint32_t i = 0; i < n; ++i)
            g[i] = grad(r, i, step);
          w.push_pull("t", g.data(), outs[r].data()).get();
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks)
    t.join();
  return errors;
}
bool maps_libfabric(pid_t pid) {
  return testing::read_file("/proc/" + std::to_string(pid) + "/maps").find("libfabric.so")
         != std::string::npos;
}
} // namespace

TEST_CASE("libfabric is loaded only by a process that opens a fabric domain",
          "[integration][fabric]") {
  // Its providers' libraries came with it at every start (libinfinipath's clock
  // calibration: 0.2 s of sleeps; transports/fabric/libfabric.hpp).
  testing::node_process tcp_only;
  CHECK_FALSE(maps_libfabric(tcp_only.pid()));
  testing::node_process with_fabric{testing::fabric_node_args()};
  CHECK(maps_libfabric(with_fabric.pid()));
}

TEST_CASE("fabric: one endpoint per NIC, workers spread over them",
          "[integration][fabric]") {
  auto nics = transports::fabric::domain::open_nics("tcp", {"all"});
  REQUIRE(!nics.empty());
  if (nics.size() < 2)
    WARN("the tcp provider offers one NIC here: the spread is not exercised");
  testing::node_process node{
    {"--fabric", "tcp", "--fabric-nics", "all", "--fabric-pool", "32"}};
  for (auto& d : nics)
    CHECK(node.wait_for_log("fabric: fabric://tcp;ofi_rxm/" + d->nic()));

  const uint32_t workers = 2;
  std::vector<std::vector<float>> outs;
  auto errors = train_over_fabric(
    node.address(), "nics", workers, 3000, 1,
    [](uint32_t r, uint32_t, int) { return float(r + 1); }, outs);
  for (uint32_t r = 0; r < workers; ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
    CHECK(outs[r][0] == 3.0f); // 1 + 2
    CHECK(outs[r][2999] == 3.0f);
  }
  auto log = node.log();
  if (nics.size() >= 2) {
    // Each worker on its own NIC (the least loaded pool takes the next one).
    size_t used = 0;
    for (auto& d : nics)
      used += occurrences(log, "on fabric://tcp;ofi_rxm/" + d->nic() + ";") > 0;
    CHECK(used == workers);
  } else {
    CHECK(occurrences(log, "on fabric://tcp;ofi_rxm/") == workers);
  }
}

TEST_CASE("fabric: several endpoints on one NIC, each a domain of its own, workers "
          "spread over them",
          "[integration][fabric]") {
  // Each endpoint with its own domain, pool and poller (an endpoint's progress runs one
  // thread at a time); the least loaded pool takes the next worker.
  testing::node_process node{
    {"--fabric", "tcp", "--fabric-endpoints", "3", "--fabric-pool", "32"}};
  CHECK(node.wait_for_log("fabric endpoints: 3 per NIC (--fabric-endpoints 3)"));
  for (auto* k : {"#0 (", "#1 (", "#2 ("})
    CHECK(node.wait_for_log(k));
  // The NIC's 32 MiB pool shared out: a third each.
  CHECK(occurrences(node.log(), "from a 10.6667 MiB receive pool") == 3);

  const uint32_t workers = 3, n = 5000;
  std::vector<std::vector<float>> outs;
  auto errors = train_over_fabric(
    node.address(), "endpoints", workers, n, 3,
    [](uint32_t r, uint32_t i, int step) {
      return float(r + 1) * 0.5f + float(i % 7) + float(step);
    },
    outs);
  for (uint32_t r = 0; r < workers; ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
    for (uint32_t i : {0u, 1u, 4321u, n - 1}) {
      // The last step's sum, in rank order: 0.5 + 1.0 + 1.5 + 3 x (i % 7 + 2).
      float want = 0.0f;
      for (uint32_t q = 0; q < workers; ++q)
        want += float(q + 1) * 0.5f + float(i % 7) + 2.0f;
      CHECK(outs[r][i] == want);
    }
    CHECK(outs[r] == outs[0]);
  }
  auto log = node.log();
  for (auto* k : {"#0; it grants", "#1; it grants", "#2; it grants"}) {
    INFO(k);
    CHECK(occurrences(log, k) == 1); // one worker on each endpoint
  }
}

TEST_CASE("fabric: a NIC the provider lacks stops the node with the ones it has",
          "[integration][fabric]") {
  auto stopped = testing::node_that_stops(
    {"--fabric", "tcp", "--fabric-nics", "no-such-nic0"});
  REQUIRE(stopped.code.has_value());
  CHECK(*stopped.code == 1);
  CHECK_THAT(stopped.log, Catch::Contains("has no NIC 'no-such-nic0' here (it has: ")
                            && Catch::Contains("lo"));
}

} // namespace rw_integration_fabric_nics
