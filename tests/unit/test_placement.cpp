// The placement policy on described machines (no hardware needed).

#include <catch2/catch.hpp>

#include "runtime/chunking.hpp"
#include "runtime/placement.hpp"

namespace rw_unit_placement {

using namespace rw::runtime;

namespace {

// Two NUMA domains of two cores each; eth0 on domain 1, eth1 on domain 0, lo unknown.
std::shared_ptr<const topology> two_domains() {
  std::vector<core_info> cores{{0, 0, 0}, {1, 1, 0}, {2, 2, 1}, {3, 3, 1}};
  std::vector<numa_info> numa{{0, 1 << 30, {0, 1}}, {1, 1 << 30, {2, 3}}};
  std::vector<nic_info> nics{{"eth0", "network", 1, true, {"10.0.0.1"}},
                             {"eth1", "network", 0, true, {"10.0.1.1"}},
                             {"lo", "network", 0, false, {"127.0.0.1"}}};
  return topology::describe_machine(numa, cores, nics);
}

placement_request listen(std::vector<std::string> endpoints) {
  placement_request r;
  r.endpoints = std::move(endpoints);
  return r;
}

// A 16-core host of one domain, eth0 on it.
std::shared_ptr<const topology> sixteen_cores() {
  std::vector<core_info> cores;
  std::vector<uint32_t> cpus;
  for (uint32_t i = 0; i < 16; ++i) {
    cores.push_back({i, i, 0});
    cpus.push_back(i);
  }
  std::vector<numa_info> numa{{0, 1ull << 34, cpus}};
  std::vector<nic_info> nics{{"eth0", "network", 0, true, {"10.0.0.1"}},
                             {"lo", "network", 0, false, {"127.0.0.1"}}};
  return topology::describe_machine(numa, cores, nics);
}

} // namespace

TEST_CASE("auto pollers: one per four cores from 8 cores on, on cores kept from shards",
          "[placement]") {
  auto plan = plan_placement(*sixteen_cores(), listen({"eth0:7700"}));
  REQUIRE(plan.endpoints.size() == 4);
  REQUIRE(plan.shards.size() == 12);
  std::vector<uint32_t> poller_cpus;
  for (uint32_t k = 0; k < 4; ++k) {
    CHECK(plan.endpoints[k].listen == "10.0.0.1:" + std::to_string(7700 + k));
    CHECK(plan.endpoints[k].listen_index == 0);
    CHECK(plan.endpoints[k].poller_index == k);
    poller_cpus.push_back(plan.endpoints[k].poller.core.os_cpu);
  }
  CHECK(poller_cpus == std::vector<uint32_t>{12, 13, 14, 15});
  for (uint32_t i = 0; i < 12; ++i)
    CHECK(plan.shards[i].core.os_cpu == i);
  CHECK(plan.notes.empty()); // nobody shares a core
  CHECK_THAT(plan.pollers_why, Catch::Contains("auto: 4 per --listen address (16 cores"));
  // Every shard is served by all four endpoints.
  CHECK(plan.shard_endpoints[0] == std::vector<uint32_t>{0, 1, 2, 3});

  // Two addresses share the auto count; port 0 gives each endpoint a free port.
  plan = plan_placement(*sixteen_cores(), listen({"eth0:0", "127.0.0.1:0"}));
  REQUIRE(plan.endpoints.size() == 4);
  CHECK(plan.endpoints[1].listen == "10.0.0.1:0");
  CHECK(plan.endpoints[2].listen == "127.0.0.1:0");
  CHECK(plan.endpoints[3].listen_index == 1);
  CHECK(plan.shards.size() == 12);

  // Shards given: they take the first cores, the pollers the free ones after them.
  auto r = listen({"eth0:7700"});
  r.shards = 16;
  plan = plan_placement(*sixteen_cores(), r);
  CHECK(plan.shards.size() == 16);
  CHECK(plan.notes.size() == 4); // every poller shares, and says so
}

TEST_CASE("pollers: N per address, and under 8 cores auto is one", "[placement]") {
  auto plan = plan_placement(*two_domains(), listen({"127.0.0.1:7700"}));
  CHECK(plan.endpoints.size() == 1);
  CHECK(plan.shards.size() == 4); // a small machine: shards on every core
  CHECK_THAT(plan.pollers_why, Catch::Contains("auto: 1 per --listen address"));
  auto r = listen({"eth0:7700", "eth1:0"});
  r.pollers = 3;
  plan = plan_placement(*two_domains(), r);
  REQUIRE(plan.endpoints.size() == 6);
  CHECK(plan.endpoints[2].listen == "10.0.0.1:7702");
  CHECK(plan.endpoints[5].listen == "10.0.1.1:0");
  for (uint32_t k = 0; k < 3; ++k) {
    CHECK(plan.endpoints[k].poller.numa == 1); // eth0's pollers in its domain
    CHECK(plan.endpoints[3 + k].poller.numa == 0);
  }
  CHECK(plan.shard_endpoints[0] == std::vector<uint32_t>{3, 4, 5});
  CHECK(plan.shard_endpoints[2] == std::vector<uint32_t>{0, 1, 2});
  r = listen({"127.0.0.1:65534"});
  r.pollers = 3;
  CHECK_THROWS_WITH(plan_placement(*two_domains(), r), Catch::Contains("past 65535"));
  r = listen({"127.0.0.1:http"});
  CHECK_THROWS_WITH(plan_placement(*two_domains(), r),
                    Catch::Contains("port is not a number"));
}

TEST_CASE("fabric endpoints per NIC: auto on the tcp provider follows the pollers",
          "[placement]") {
  auto c = choose_fabric_endpoints("tcp", 16, 1, 0);
  CHECK(c.per_nic == 4); // as many as --pollers auto gives 16 cores
  CHECK_THAT(c.why, Catch::Contains("auto: 4 per NIC (provider tcp"));
  CHECK(choose_fabric_endpoints("tcp", 16, 2, 0).per_nic == 2); // shared among NICs
  CHECK(choose_fabric_endpoints("tcp", 64, 3, 0).per_nic == 2); // 8 over 3 NICs
  CHECK(choose_fabric_endpoints("tcp", 2, 1, 0).per_nic == 1);  // a small machine
  CHECK(choose_fabric_endpoints("tcp", 16, 8, 0).per_nic == 1); // never none
  c = choose_fabric_endpoints("verbs", 64, 1, 0);
  CHECK(c.per_nic == 1); // the NIC moves the bytes
  CHECK_THAT(c.why, Catch::Contains("provider verbs: the NIC moves the bytes"));
  c = choose_fabric_endpoints("verbs", 2, 1, 3);
  CHECK(c.per_nic == 3);
  CHECK_THAT(c.why, Catch::Contains("--fabric-endpoints 3"));
}

TEST_CASE("fabric pollers take the TCP pollers' cores of their NIC's domain in turn",
          "[placement]") {
  auto topo = sixteen_cores();
  auto plan = plan_placement(*topo, listen({"eth0:7700"}));
  for (uint32_t k = 0; k < 6; ++k) {
    auto at = fabric_poller_place(*topo, plan, 0, k);
    CHECK(at.numa == 0);
    CHECK(at.core.os_cpu == 12 + k % 4); // the cores kept from the shards
  }
  CHECK(fabric_poller_place(*topo, plan, -1, 1).core.os_cpu
        == 13); // unknown: the first's
  // Two domains, the TCP poller on eth0 (domain 1): a NIC on domain 0 takes that
  // domain's cores in turn; one on domain 1 the poller's core.
  auto two = two_domains();
  plan = plan_placement(*two, listen({"eth0:7700"}));
  REQUIRE(plan.endpoints.front().poller.numa == 1);
  auto on0 = fabric_poller_place(*two, plan, 0, 0);
  auto on0b = fabric_poller_place(*two, plan, 0, 1);
  CHECK(on0.numa == 0);
  CHECK(on0.core.numa == 0);
  CHECK(on0b.core.numa == 0);
  CHECK(on0.core.os_cpu != on0b.core.os_cpu);
  auto on1 = fabric_poller_place(*two, plan, 1, 1);
  CHECK(on1.core.os_cpu == plan.endpoints.front().poller.core.os_cpu);
}

TEST_CASE("one shard per core, pollers in their NIC's domain", "[placement]") {
  auto topo = two_domains();
  auto plan = plan_placement(*topo, listen({"eth0:7700", "10.0.1.1:7701"}));
  REQUIRE(plan.shards.size() == 4);
  for (uint32_t i = 0; i < 4; ++i)
    CHECK(plan.shards[i].core.os_cpu == i);
  REQUIRE(plan.endpoints.size() == 2);
  CHECK(plan.endpoints[0].listen
        == "10.0.0.1:7700"); // the device name became its address
  CHECK(plan.endpoints[0].nic == "eth0");
  CHECK(plan.endpoints[0].poller.numa == 1);
  CHECK(topo->core_by_cpu(plan.endpoints[0].poller.core.os_cpu)->numa == 1);
  CHECK(plan.endpoints[1].nic == "eth1");
  CHECK(plan.endpoints[1].poller.numa == 0);
  // Shards are served by the endpoint of their own domain.
  CHECK(plan.shard_endpoints[0] == std::vector<uint32_t>{1});
  CHECK(plan.shard_endpoints[3] == std::vector<uint32_t>{0});
  // Four shards and two pollers on four cores: the plan says pollers share.
  CHECK(plan.notes.size() == 2);
}

TEST_CASE("shards restricted to cores or domains leave room for pollers", "[placement]") {
  auto topo = two_domains();
  auto r = listen({"eth0:7700"});
  r.numa = {0};
  auto plan = plan_placement(*topo, r);
  REQUIRE(plan.shards.size() == 2);
  CHECK(plan.shards[1].core.os_cpu == 1);
  CHECK(plan.endpoints[0].poller.numa == 1);
  CHECK(plan.notes.empty()); // the poller has domain 1 to itself
  // No endpoint in domain 0: its shards are served by every endpoint.
  CHECK(plan.shard_endpoints[0] == std::vector<uint32_t>{0});
  r = listen({"eth1:7700"});
  r.cores = {2, 3};
  r.shards = 1;
  plan = plan_placement(*topo, r);
  REQUIRE(plan.shards.size() == 1);
  CHECK(plan.shards[0].core.os_cpu == 2);
  CHECK(plan.shards[0].numa == 1);
}

TEST_CASE("what does not exist is named at start", "[placement]") {
  auto topo = two_domains();
  auto r = listen({"127.0.0.1:7700"});
  r.shards = 5;
  CHECK_THROWS_WITH(plan_placement(*topo, r),
                    Catch::Contains("5 shards asked for, but only 4"));
  r = listen({"127.0.0.1:7700"});
  r.cores = {9};
  CHECK_THROWS_WITH(plan_placement(*topo, r), Catch::Contains("core 9 does not exist"));
  r = listen({"127.0.0.1:7700"});
  r.numa = {3};
  CHECK_THROWS_WITH(plan_placement(*topo, r),
                    Catch::Contains("NUMA domain 3 does not exist"));
  CHECK_THROWS_WITH(plan_placement(*topo, listen({"eth9:7700"})),
                    Catch::Contains("neither a network device"));
  CHECK_THROWS_WITH(plan_placement(*topo, listen({"10.9.9.9:7700"})),
                    Catch::Contains("no network device here has address 10.9.9.9"));
  CHECK_THROWS_WITH(plan_placement(*topo, listen({})), Catch::Contains("listen address"));
}

TEST_CASE("a wildcard address binds every interface with no NIC affinity",
          "[placement]") {
  auto plan = plan_placement(*two_domains(), listen({"0.0.0.0:7700"}));
  CHECK(plan.endpoints[0].nic.empty());
  CHECK(plan.endpoints[0].poller.numa == 0);
}

TEST_CASE("chunks spread evenly over endpoints and shards", "[placement]") {
  rw::job_spec spec;
  spec.chunk_bytes = 4096;
  spec.tensors = {{"a", 1024 * 100, false}};
  rw::runtime::routing_table rt{spec, 4, {{0, 1}, {0, 1}, {2}, {2}}};
  auto per_endpoint = rt.chunks_per_endpoint();
  CHECK(per_endpoint == std::vector<uint64_t>{25, 25, 50});
  for (uint32_t c = 0; c < 100; ++c) {
    auto shard = rt.shard_of(0, c);
    auto e = rt.endpoint_of(0, c);
    CHECK((shard < 2 ? e < 2 : e == 2));
  }
}

} // namespace rw_unit_placement
