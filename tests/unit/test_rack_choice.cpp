// Where a worker of a hierarchical job placed at join goes (actors/cluster/rack_choice):
// same host first (one node there; or several, then the rack option, the node named,
// else the round trip among them), then the rack option, the node named, else the round
// trip among every node; and what a node outside the job answers.

#include <catch2/catch.hpp>

#include "actors/cluster/rack_choice.hpp"

namespace rw_unit_rack_choice {

using namespace rw;
using namespace rw::actors;
using namespace rw::actors::detail;

namespace {

// Racks a, b, c: n0 alone on 10.0.0.1, n1 and n2 sharing 10.0.0.2.
job_layout three_racks() {
  job_layout l;
  l.nodes = {"n0", "n1", "n2"};
  l.addresses = {"10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.2:7710"};
  l.racks = {"a", "b", "c"};
  l.reduction = "hierarchical";
  l.join_timeout_ms = 1000;
  return l;
}

placement_facts facts(const std::string& host, const std::string& rack, uint32_t named) {
  placement_facts f;
  f.peer_host = host;
  f.rack = rack;
  f.named = named;
  return f;
}

} // namespace

TEST_CASE("a rack option naming no rack of the job is refused, naming the job's racks",
          "[rack_choice]") {
  auto c = choose_rack(three_racks(), "j", facts("10.9.9.9", "z", 0));
  CHECK(c.node == no_node);
  CHECK(c.error == "the worker's rack 'z' is not a rack of job 'j' (its racks: a, b, c)");
}

TEST_CASE("the one node on the worker's host takes it, over its rack option and the node "
          "it named",
          "[rack_choice]") {
  auto c = choose_rack(three_racks(), "j", facts("10.0.0.1", "c", 2));
  CHECK(c.node == 0);
  CHECK(c.error.empty());
  CHECK(c.reason
        == "same host as n0 (10.0.0.1); the worker's rack option 'c' gives way to "
           "its host");
}

TEST_CASE(
  "nodes sharing the worker's host: its rack option, else the node it named, else "
  "the round trip among them",
  "[rack_choice]") {
  auto l = three_racks();
  auto by_option = choose_rack(l, "j", facts("10.0.0.2", "c", 1));
  CHECK(by_option.node == 2);
  CHECK(by_option.reason
        == "same host (10.0.0.2) as n1, n2; among them the worker's rack "
           "option 'c'");
  // A rack option off the host gives way to it: the node named among them decides.
  auto by_named = choose_rack(l, "j", facts("10.0.0.2", "a", 1));
  CHECK(by_named.node == 1);
  CHECK(by_named.reason
        == "same host (10.0.0.2) as n1, n2; among them the rack of the node "
           "it named (n1)");
  auto open = choose_rack(l, "j", facts("10.0.0.2", "", no_node));
  CHECK(open.node == no_node);
  CHECK(open.candidates == std::vector<uint32_t>{1, 2});
  auto off_host_named = choose_rack(l, "j", facts("10.0.0.2", "", 0));
  CHECK(off_host_named.node == no_node);
  CHECK(off_host_named.candidates == std::vector<uint32_t>{1, 2});
}

TEST_CASE("off every node's host: the rack option, else the node named, else the round "
          "trip among all",
          "[rack_choice]") {
  auto l = three_racks();
  auto by_option = choose_rack(l, "j", facts("10.9.9.9", "b", 0));
  CHECK(by_option.node == 1);
  CHECK(by_option.reason == "the worker's rack option 'b'");
  auto f = facts("10.9.9.9", "", 2);
  f.picked_by = "lowest round trip 0.100 ms among ...";
  auto by_named = choose_rack(l, "j", f);
  CHECK(by_named.node == 2);
  CHECK(by_named.reason
        == "rack of the node it named (n2), which the worker picked by "
           "lowest round trip 0.100 ms among ...");
  auto open = choose_rack(l, "j", facts("10.9.9.9", "", no_node));
  CHECK(open.node == no_node);
  CHECK(open.candidates == std::vector<uint32_t>{0, 1, 2});
  // A wildcard address names no host.
  l.addresses[0] = "0.0.0.0:7700";
  CHECK(choose_rack(l, "j", facts("0.0.0.0", "", no_node)).candidates.size() == 3);
}

TEST_CASE("a node outside the job sends the worker on: to one node, or to all to measure",
          "[rack_choice]") {
  auto l = three_racks();
  std::string why;
  auto one = send_elsewhere(l, "j", 0, facts("10.9.9.9", "c", no_node), "coord", why);
  CHECK(one.code == errc::moved);
  CHECK(one.candidates == std::vector<std::string>{"10.0.0.2:7710"});
  CHECK_THAT(one.message,
             Catch::StartsWith("10.0.0.2:7710 is where rank 0 of job 'j' says "
                               "hello"));
  auto all = send_elsewhere(l, "j", 0, facts("10.9.9.9", "", no_node), "coord", why);
  CHECK(all.code == errc::moved);
  CHECK(all.candidates == l.addresses);
  CHECK_THAT(why, Catch::EndsWith("the worker picks the nearest by round trip"));
  auto bad = send_elsewhere(l, "j", 0, facts("10.9.9.9", "z", no_node), "coord", why);
  CHECK(bad.code == errc::invalid_spec);
  CHECK(bad.candidates.empty());
  // A job with worker_racks: the rank's rack decides, and a contradicting option is refused.
  l.join_timeout_ms = 0;
  l.rank_racks = {1, 0, 2};
  auto fixed = send_elsewhere(l, "j", 1, facts("10.0.0.2", "", no_node), "coord", why);
  CHECK(fixed.candidates == std::vector<std::string>{"10.0.0.1:7700"});
  auto contradicts = send_elsewhere(l, "j", 1, facts("10.9.9.9", "b", no_node), "coord",
                                    why);
  CHECK(contradicts.code == errc::invalid_spec);
  CHECK(contradicts.message
        == "rank 1 of job 'j' belongs to rack a, but the worker says its "
           "rack is 'b'");
}

} // namespace rw_unit_rack_choice
