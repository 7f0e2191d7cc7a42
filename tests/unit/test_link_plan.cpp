// auto's plan from measured rates: a probed core link counts like a configured one, the
// plan text names where every number came from, and a failed probe falls back to
// equal links, saying why. The NIC speed a node reports is read from sysfs.

#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "actors/cluster/state.hpp"
#include "runtime/nic_speed.hpp"

namespace rw_unit_link_plan {

using namespace rw;
using namespace rw::actors;
using namespace rw::actors::detail;

namespace {

// Two rack-aggs, racks a and b, ids 1 and 2, no rates configured.
struct two_racks {
  two_racks() {
    for (uint32_t i = 0; i < 2; ++i) {
      members[i].info.id = i + 1;
      members[i].info.name = "n" + std::to_string(i);
      members[i].info.rack = i == 0 ? "a" : "b";
      members[i].info.endpoints = {"127.0.0.1:" + std::to_string(7700 + i)};
    }
  }
  std::vector<const member*> nodes() const { return {&members[0], &members[1]}; }
  member members[2];
};

job_spec four_workers() {
  job_spec s;
  s.name = "j";
  s.num_workers = 4;
  return s;
}

core_probe probed(double gbps, uint64_t us) {
  core_probe p;
  p.ok = true;
  p.gbps = gbps;
  p.elapsed_us = us;
  p.from = "n0";
  p.to = "n1";
  p.when = steady::now();
  return p;
}

// Both nodes were touched by the one probe n0->n1, as probe_core_links reports it.
core_probes both(const core_probe& p) {
  return {{1, {p}}, {2, {p}}};
}

std::string plan(const two_racks& c, const core_probes& probes, std::string& reduction) {
  job_placement p;
  p.racks = {"a", "b"};
  job_layout layout;
  std::string why;
  REQUIRE(choose_reduction(four_workers(), p, c.nodes(), probes, layout, why));
  reduction = layout.reduction;
  return layout.plan;
}

} // namespace

TEST_CASE("auto wants probes only where a core rate is missing", "[link_plan]") {
  two_racks c;
  job_placement p;
  p.racks = {"a", "b"};
  CHECK(wants_core_probes(four_workers(), p, c.nodes()));
  c.members[0].info.core_gbps = 1;
  CHECK(wants_core_probes(four_workers(), p, c.nodes())); // n1 still has none
  c.members[1].info.core_gbps = 1;
  CHECK_FALSE(wants_core_probes(four_workers(), p, c.nodes()));
  c.members[1].info.core_gbps = 0;
  p.reduction = "flat";
  CHECK_FALSE(wants_core_probes(four_workers(), p, c.nodes()));
  p.reduction = "auto";
  auto ssp = four_workers();
  ssp.consistency.model = consistency_spec::ssp;
  CHECK_FALSE(wants_core_probes(ssp, p, c.nodes())); // hierarchical cannot run it
}

TEST_CASE("a probed 4:1 core picks hierarchical, a probed full core flat",
          "[link_plan]") {
  two_racks c;
  std::string reduction;
  // The racks' links are 4 Gbit/s (configured on one node, the NIC's on the other); the
  // core measures 1: oversubscribed 4:1.
  c.members[0].info.uplink_gbps = 4;
  c.members[1].info.nic_gbps = 10;
  c.members[1].info.nic = "eth0";
  auto text = plan(c, both(probed(1.0, 41'000)), reduction);
  CHECK(reduction == "hierarchical");
  CHECK_THAT(text, Catch::StartsWith("auto: hierarchical; link-bound time per GiB"));
  CHECK_THAT(text, Catch::Contains("agg links 4 Gbit/s (configured)"));
  CHECK_THAT(text, Catch::Contains("core links 1 Gbit/s (probed n0->n1 in 41 ms)"));
  // Both NICs report speeds: the slower is taken and named as the source.
  c.members[0].info.uplink_gbps = 0;
  c.members[0].info.nic_gbps = 10;
  c.members[0].info.nic = "eth1";
  c.members[1].info.nic_gbps = 4;
  text = plan(c, both(probed(1.0, 41'000)), reduction);
  CHECK(reduction == "hierarchical");
  CHECK_THAT(text, Catch::Contains("agg links 4 Gbit/s (NIC speed of n1's eth0)"));
  // Nothing known of the racks' links: as fast as the probed core, so no
  // oversubscription, and flat's spread over both nodes wins.
  c.members[0].info.nic_gbps = 0;
  c.members[1].info.nic_gbps = 0;
  text = plan(c, both(probed(9.5, 3'000)), reduction);
  CHECK(reduction == "flat");
  CHECK_THAT(text, Catch::StartsWith("auto: flat;"));
  CHECK_THAT(text, Catch::Contains("agg links 9.5 Gbit/s (not configured, no NIC speed: "
                                   "assumed as fast as the core link)"));
  CHECK_THAT(text, Catch::Contains("core links 9.5 Gbit/s (probed n0->n1 in 3 ms)"));
}

TEST_CASE("the slowest probe counts, and a configured rate beats a probed one",
          "[link_plan]") {
  two_racks c;
  std::string reduction;
  c.members[0].info.uplink_gbps = 4;
  c.members[1].info.uplink_gbps = 4;
  auto slow = probed(0.5, 80'000);
  slow.from = "n1";
  slow.to = "n0";
  core_probes probes{{1, {probed(2, 20'000)}}, {2, {probed(2, 20'000), slow}}};
  auto text = plan(c, probes, reduction);
  CHECK_THAT(text, Catch::Contains("core links 0.5 Gbit/s (probed n1->n0 in 80 ms)"));
  // A result kept from an earlier job says how old it is.
  probes[2][1].when = steady::now() - std::chrono::seconds(12);
  text = plan(c, probes, reduction);
  CHECK_THAT(text,
             Catch::Contains("core links 0.5 Gbit/s (probed n1->n0 in 80 ms, 12 s ago)"));
  c.members[1].info.core_gbps = 0.25;
  text = plan(c, probes, reduction);
  CHECK_THAT(text, Catch::Contains("core links 0.25 Gbit/s (configured)"));
}

TEST_CASE("a failed probe falls back to equal links and says why", "[link_plan]") {
  two_racks c;
  std::string reduction;
  core_probe failed;
  failed.from = "n0";
  failed.to = "n1";
  failed.error = "cannot connect to 127.0.0.1:7701: refused";
  auto text = plan(c, both(failed), reduction);
  CHECK(reduction == "flat"); // equal links: no oversubscription
  CHECK_THAT(text, Catch::Contains("agg links 1 Gbit/s (assumed: nothing configured, "
                                   "reported or probed)"));
  CHECK_THAT(text,
             Catch::Contains("core links 1 Gbit/s (not configured or measured: as "
                             "the agg links; the probe n0->n1 failed: cannot connect "
                             "to 127.0.0.1:7701: refused)"));
  // With the racks' links configured the same rule holds: the core counts as they do.
  c.members[0].info.uplink_gbps = 2;
  c.members[1].info.uplink_gbps = 2;
  text = plan(c, both(failed), reduction);
  CHECK_THAT(text, Catch::Contains("core links 2 Gbit/s (not configured or measured"));
}

TEST_CASE("a NIC's speed is read from sysfs, and unknown when it reports none",
          "[link_plan]") {
  auto root = "/tmp/rw-unit-sysfs-" + std::to_string(getpid());
  ::mkdir(root.c_str(), 0700);
  auto device = [&](const std::string& name, const char* speed) {
    ::mkdir((root + "/" + name).c_str(), 0700);
    if (speed != nullptr)
      std::ofstream{root + "/" + name + "/speed"} << speed << "\n";
  };
  device("eth9", "25000");
  device("eth8", "-1");
  device("lo", nullptr);
  auto fast = runtime::device_speed("eth9", root);
  CHECK(fast.gbps == 25.0);
  CHECK(fast.device == "eth9");
  auto down = runtime::device_speed("eth8", root);
  CHECK(down.gbps == 0);
  CHECK_THAT(down.why, Catch::Contains("unknown link speed"));
  CHECK(runtime::device_speed("lo", root).gbps == 0);
  // Loopback holds 127.0.0.1 (and reports no speed); nothing holds the wildcard.
  auto lo = runtime::nic_speed_for("127.0.0.1", root);
  CHECK(lo.device == "lo");
  CHECK(lo.gbps == 0);
  CHECK(runtime::nic_speed_for("0.0.0.0", root).device.empty());
  for (auto* d : {"eth9", "eth8", "lo"}) {
    std::remove((root + "/" + d + "/speed").c_str());
    ::rmdir((root + "/" + d).c_str());
  }
  ::rmdir(root.c_str());
}

} // namespace rw_unit_link_plan
