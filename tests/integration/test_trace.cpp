// The step timeline end to end (runtime/trace.hpp): a node started with --trace and
// rw-bench's workers with --trace write Chrome trace-event JSON with every event the
// docs name (docs/operations.md, "Tracing"), per transport, on the threads that did it.

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/bench_json.hpp"
#include "tests/support/node_process.hpp"

namespace rw_integration_trace {

using namespace rw;
using json = nlohmann::json;

namespace {

json read_trace(const std::string& path) {
  std::ifstream in{path};
  INFO(path);
  REQUIRE(in.good());
  auto events = json::parse(in, nullptr, false);
  REQUIRE_FALSE(events.is_discarded());
  REQUIRE(events.is_array());
  return events;
}

std::map<std::string, int> counts(const json& events) {
  std::map<std::string, int> n;
  for (auto& e : events)
    ++n[e.at("name").get<std::string>()];
  return n;
}

// The name of each thread (tid) that recorded, from the metadata events.
std::map<long, std::string> thread_names(const json& events) {
  std::map<long, std::string> names;
  for (auto& e : events)
    if (e["name"] == "thread_name")
      names[e["tid"].get<long>()] = e["args"]["name"].get<std::string>();
  return names;
}

} // namespace

TEST_CASE("rw-node --trace and the workers' trace option write the step timeline",
          "[integration][trace]") {
  // 2 workers x 1 MiB in 256 KiB chunks: 4 chunks; 1 warm-up + 3 timed iterations.
  constexpr int workers = 2, chunks = 4, steps = 4;
  for (std::string transport : {"tcp", "shm", "fabric"}) {
    DYNAMIC_SECTION(transport) {
      auto node_trace = testing::temp_path("node-trace.json");
      auto prefix = testing::temp_path("worker-trace");
      {
        testing::node_process node{{"--trace", node_trace, "--fabric", "tcp"}};
        std::vector<std::string> argv{RW_BENCH_PATH,
                                      "comm",
                                      "--connect",
                                      node.address(),
                                      "--open-job",
                                      "--workers",
                                      std::to_string(workers),
                                      "--bytes",
                                      "1MiB",
                                      "--chunk-bytes",
                                      "256KiB",
                                      "--iters",
                                      "3",
                                      "--warmup",
                                      "1",
                                      "--json",
                                      "--transport",
                                      transport,
                                      "--trace",
                                      prefix,
                                      "--verify"};
        tools::subprocess bench{argv, true};
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        auto out = bench.read_all(deadline);
        auto rc = bench.wait_until(deadline);
        INFO(out << node.log_tail(3000));
        REQUIRE(rc);
        REQUIRE(*rc == 0);
        CHECK(testing::bench_json(out).at("verified") == true);
        CHECK(node.log().find("trace: writing the step timeline to " + node_trace)
              != std::string::npos);
      } // the node stops: its file is complete

      auto events = read_trace(node_trace);
      auto n = counts(events);
      INFO(events.dump().substr(0, 3000));
      CHECK(n["process_name"] == 1);
      // Every step's pushes, steps and answers; a worker that is not pacing the run may
      // push once more before it sees the run is over (rw-bench), so at least these.
      CHECK(n["push received"] >= workers * chunks * steps);
      CHECK(n["push"] >= workers * chunks * steps);
      CHECK(n["step"] >= chunks * steps);
      CHECK(n["answer"] >= workers * chunks * steps);
      CHECK(n["push received"] <= workers * chunks * (steps + 1));
      CHECK(n["send"] >= 1);
      CHECK(n["poll round"] >= 1);
      // Each step every rank completed on a shard: its slowest rank (docs/operations.md,
      // "Stragglers"), on every shard that serves a chunk.
      CHECK(n["slowest rank"] >= steps);
      // Each kind on the threads that do it.
      auto names = thread_names(events);
      // The file's last event says what it holds and what formatting it cost.
      REQUIRE(n["trace cost"] == 1);
      auto& cost = events.back();
      CHECK(cost["name"] == "trace cost");
      CHECK(cost["args"]["records"].get<size_t>()
            == events.size() - n["process_name"] - n["thread_name"] - 1);
      CHECK(cost["args"]["format_cpu_us"].get<long>() >= 0);
      for (auto& e : events) {
        auto name = e["name"].get<std::string>();
        if (name == "process_name" || name == "thread_name" || name == "trace cost")
          continue;
        auto thread = names[e["tid"].get<long>()];
        INFO(name << " on " << thread);
        if (name == "push received" || name == "poll round")
          CHECK(thread.rfind("rw-poll", 0) == 0);
        else
          CHECK(thread.rfind("rw-shard-", 0) == 0);
        if (name == "step") {
          CHECK(e["ph"] == "X");
          CHECK(e["args"]["clock"].get<long>() < steps);
          CHECK(e["args"]["chunk"].get<long>() < chunks);
        }
        if (name == "slowest rank") {
          CHECK(e["ph"] == "X");
          CHECK(e["dur"].get<double>() >= 0);
          CHECK(e["args"]["rank"].get<long>() < workers);
          CHECK(e["args"]["clock"].get<long>() <= steps);
        }
      }

      for (int r = 0; r < workers; ++r) {
        auto path = prefix + ".rank" + std::to_string(r) + ".json";
        auto w = read_trace(path);
        auto wn = counts(w);
        CHECK(wn["push_pull"] >= steps);
        CHECK(wn["push_pull"] <= steps + 1);
        std::set<long> clocks;
        for (auto& e : w)
          if (e["name"] == "push_pull") {
            CHECK(e["args"]["rank"] == r);
            CHECK(e["args"]["tensor"] == 0);
            CHECK(e["dur"].get<double>() > 0);
            clocks.insert(e["args"]["clock"].get<long>());
          }
        for (long c = 0; c < steps; ++c)
          CHECK(clocks.count(c) == 1);
        std::filesystem::remove(path);
      }
      std::filesystem::remove(node_trace);
    }
  }
}

TEST_CASE("rw-node --trace to a file it cannot write is a configuration error",
          "[integration][trace]") {
  auto log = testing::temp_path("trace-refused.log");
  tools::subprocess node{{RW_NODE_PATH, "--role", "rack-agg", "--listen", "127.0.0.1:0",
                          "--trace", "/nonexistent-dir/trace.json"},
                         false,
                         log};
  auto rc = node.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(20));
  auto text = testing::read_file(log);
  INFO(text);
  REQUIRE(rc);
  CHECK(*rc == 2);
  CHECK(text.find("bad configuration: trace: cannot write /nonexistent-dir/trace.json")
        != std::string::npos);
  std::filesystem::remove(log);
}

} // namespace rw_integration_trace
