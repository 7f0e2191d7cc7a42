// A node in this process: its threads run where the plan says, its memory lives on the
// planned NUMA domain, its supervisor restarts a failed shard, and a config naming what
// the machine does not have fails at start.

#include <future>

#include <caf/all.hpp>
#include <thread>

#include <catch2/catch.hpp>

#include "actors/node/rack_agg_node.hpp"
#include "rackweave/worker.hpp"
#include "runtime/topology.hpp"

namespace rw_integration_node_placement {

using namespace rw;

namespace {

runtime::node_config local_config() {
  runtime::node_config cfg;
  cfg.listen = {"127.0.0.1:0"};
  cfg.prealloc_buffers = 8;
  cfg.open_jobs = true; // workers here make their own jobs
  return cfg;
}

template <class Handle, class Stats>
Stats ask_stats(caf::actor_system& sys, const Handle& h) {
  caf::scoped_actor self{sys};
  Stats out;
  self->request(h, std::chrono::seconds(5), actors::stats_atom::value)
    .receive([&](Stats& s) { out = s; },
             [&](caf::error& err) { FAIL("stats failed: " << sys.render(err)); });
  return out;
}

worker_options job(const std::string& address, const std::string& name, uint32_t workers,
                   uint32_t rank) {
  worker_options o;
  o.connect = address;
  o.rank = rank;
  o.job.name = name;
  o.job.num_workers = workers;
  o.job.chunk_bytes = 4096;
  o.job.tensors = {{"t", 20000, false}};
  o.request_timeout = std::chrono::seconds(20);
  return o;
}

void run_one_step(const std::string& address, const std::string& name) {
  worker w{job(address, name, 1, 0)};
  std::vector<float> g(20000, 1.5f), out(20000);
  w.push_pull("t", g.data(), out.data()).get();
  CHECK(out[19999] == 1.5f);
}

} // namespace

TEST_CASE("shards and pollers run on their planned cores, memory on their domain",
          "[integration][placement]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  actors::rack_agg_node node{sys, local_config()};
  auto& plan = node.plan();
  REQUIRE(node.shards().size() == plan.shards.size());
  for (size_t i = 0; i < node.shards().size(); ++i) {
    auto s = ask_stats<actors::chunk_shard_actor, actors::shard_stats>(sys,
                                                                       node.shards()[i]);
    INFO("shard " << i);
    int cpu = static_cast<int>(plan.shards[i].core.os_cpu);
    CHECK(s.cpu == cpu);
    CHECK(s.affinity == std::vector<int>{cpu});
  }
  for (size_t i = 0; i < node.pollers().size(); ++i) {
    auto p = ask_stats<actors::nic_poller_actor, actors::poller_stats>(sys,
                                                                       node.pollers()[i]);
    INFO("poller " << i);
    int cpu = static_cast<int>(plan.endpoints[i].poller.core.os_cpu);
    CHECK(p.affinity == std::vector<int>{cpu});
    CHECK(p.cpu == cpu);
    CHECK(p.buffers >= 8); // pre-allocated at start
    CHECK(p.buffer_numa == static_cast<int>(plan.endpoints[i].poller.numa));
  }
  run_one_step(node.address(), "placed");
  for (size_t i = 0; i < node.shards().size(); ++i) {
    auto s = ask_stats<actors::chunk_shard_actor, actors::shard_stats>(sys,
                                                                       node.shards()[i]);
    INFO("shard " << i);
    CHECK(s.memory_numa == static_cast<int>(plan.shards[i].numa));
    CHECK(s.pushes > 0);
  }
  node.stop();
}

TEST_CASE("with pinning off (--no-pin), threads are left to the OS",
          "[integration][placement]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  auto c = local_config();
  c.pin = false;
  actors::rack_agg_node node{sys, c};
  auto s = ask_stats<actors::chunk_shard_actor, actors::shard_stats>(sys,
                                                                     node.shards()[0]);
  CHECK(s.affinity.size() == runtime::current_affinity().size());
  node.stop();
}

TEST_CASE(
  "the supervisor restarts a killed shard with its state: a waiting step completes",
  "[integration][placement]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  actors::rack_agg_node node{sys, local_config()};
  worker waiting{job(node.address(), "victim", 2, 0)};
  std::vector<float> g(20000, 1.0f), out(20000);
  auto fut = waiting.push_pull("t", g.data(), out.data());     // waits for rank 1
  std::this_thread::sleep_for(std::chrono::milliseconds(100)); // rank 0's chunks counted
  auto before = node.shards()[0];
  caf::anon_send_exit(before, caf::exit_reason::kill);
  // The supervisor's successor holds rank 0's gradient: rank 1 completes the step.
  worker late{job(node.address(), "victim", 2, 1)};
  std::vector<float> g1(20000, 2.0f), out1(20000);
  late.push_pull("t", g1.data(), out1.data()).get();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  fut.get();
  CHECK(out[0] == 3.0f);
  CHECK(out[19999] == 3.0f);
  CHECK(out1[19999] == 3.0f);
  run_one_step(node.address(), "after-restart"); // and new jobs run
  node.stop();
}

TEST_CASE("the supervisor restarts a killed poller on its endpoint: connections stay "
          "bound, steps go on",
          "[integration][placement]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  actors::rack_agg_node node{sys, local_config()};
  auto o0 = job(node.address(), "poller-victim", 2, 0);
  auto o1 = job(node.address(), "poller-victim", 2, 1);
  o0.transport = o1.transport = "tcp"; // every chunk through the TCP poller
  worker w0{o0};
  worker w1{o1};
  std::vector<float> g0(20000, 1.0f), g1(20000, 2.0f), out0(20000), out1(20000);
  auto first = w0.push_pull("t", g0.data(), out0.data());
  w1.push_pull("t", g1.data(), out1.data()).get();
  first.get();
  auto fut = w0.push_pull("t", g0.data(), out0.data()); // waits for rank 1's step 1
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  caf::anon_send_exit(node.pollers()[0], caf::exit_reason::kill);
  std::this_thread::sleep_for(std::chrono::milliseconds(100)); // restarted meanwhile
  // Rank 1's frames reach the successor, which still knows the connection's binding.
  w1.push_pull("t", g1.data(), out1.data()).get();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  fut.get();
  CHECK(out0[19999] == 3.0f); // the step's sum, 1 + 2 (optimizer sum)
  CHECK(out1[0] == 3.0f);
  run_one_step(node.address(), "after-poller-restart"); // and new workers join
  node.stop();
}

TEST_CASE("a config naming what the machine lacks fails at start",
          "[integration][placement]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  auto cores = runtime::topology::discover()->cores().size();
  auto c = local_config();
  c.shards = static_cast<uint32_t>(cores + 1);
  CHECK_THROWS_WITH((actors::rack_agg_node{sys, c}), Catch::Contains("shards asked for"));
  c = local_config();
  c.shard_cores = {4096};
  CHECK_THROWS_WITH((actors::rack_agg_node{sys, c}),
                    Catch::Contains("core 4096 does not exist"));
  c = local_config();
  c.shard_numa = {63};
  CHECK_THROWS_WITH((actors::rack_agg_node{sys, c}),
                    Catch::Contains("NUMA domain 63 does not exist"));
  c = local_config();
  c.listen = {"nosuchnic0:7700"};
  CHECK_THROWS_WITH((actors::rack_agg_node{sys, c}), Catch::Contains("network device"));
  c = local_config();
  c.kernels = "sse9";
  CHECK_THROWS_WITH((actors::rack_agg_node{sys, c}), Catch::Contains("unknown kernels"));
}

} // namespace rw_integration_node_placement
