// The step timeline (runtime/trace.hpp): what a session writes is Chrome trace-event
// JSON with the events recorded on every thread, their threads named; nothing is
// recorded without a session.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "rackweave/errc.hpp"
#include "runtime/thread_cpu.hpp"
#include "runtime/trace.hpp"

namespace rw_unit_trace {

using namespace rw::runtime;
using json = nlohmann::json;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path()
          / ("rw-trace-" + std::to_string(::getpid()) + "-" + name + ".json"))
    .string();
}

json read_json(const std::string& path) {
  std::ifstream in{path};
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<json> named(const json& events, const std::string& name) {
  std::vector<json> out;
  for (auto& e : events)
    if (e.value("name", "") == name)
      out.push_back(e);
  return out;
}

} // namespace

TEST_CASE("no session: nothing is recorded", "[trace]") {
  CHECK_FALSE(trace::on());
  trace::instant("ignored", "test"); // no session, no effect, no crash
  trace::scope s{"ignored", "test"};
}

TEST_CASE("a session writes trace-event JSON from every thread, threads named",
          "[trace]") {
  auto path = temp_path("threads");
  {
    trace::session s{path, "unit test"};
    CHECK(trace::on());
    auto begin = trace::now_ns();
    trace::complete("main work", "test", begin, {7, 1, 2, 3, 42});
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([t] {
        name_this_thread("rw-test-" + std::to_string(t));
        for (uint64_t i = 0; i < 1000; ++i) {
          trace::scope sc{"chunk", "test", {}};
          sc.args().chunk = i;
          if (i % 100 == 0)
            trace::instant("mark", "test", {trace::about::none, uint64_t(t)});
        }
      });
    for (auto& t : threads)
      t.join();
  }
  CHECK_FALSE(trace::on());
  auto events = read_json(path);
  REQUIRE(events.is_array());
  // 3 x 1000 chunks, 3 x 10 marks, one main event, metadata.
  CHECK(named(events, "chunk").size() == 3000);
  CHECK(named(events, "mark").size() == 30);
  auto main = named(events, "main work");
  REQUIRE(main.size() == 1);
  CHECK(main[0]["ph"] == "X");
  CHECK(main[0]["pid"] == ::getpid());
  CHECK(main[0]["args"]
        == json{{"job", 7}, {"rank", 1}, {"tensor", 2}, {"chunk", 3}, {"clock", 42}});
  CHECK(main[0]["dur"].get<double>() >= 0);
  auto mark = named(events, "mark")[0];
  CHECK(mark["ph"] == "i");
  CHECK(mark["args"].size() == 1); // only what was given: the rank
  // Every event's time is in microseconds of the monotonic clock, which now_ns reads.
  auto now_us = trace::now_ns() / 1000.0;
  for (auto& e : named(events, "chunk")) {
    CHECK(e["ts"].get<double>() <= now_us);
    CHECK(e["ts"].get<double>() > now_us - 600e6);
  }
  std::set<std::string> thread_names;
  for (auto& e : named(events, "thread_name"))
    thread_names.insert(e["args"]["name"].get<std::string>());
  CHECK(thread_names.count("rw-test-0") == 1);
  CHECK(thread_names.count("rw-test-2") == 1);
  auto process = named(events, "process_name");
  REQUIRE(process.size() == 1);
  CHECK(process[0]["args"]["name"] == "unit test");
  // The chunks of one thread carry their numbers, in order.
  auto tid = named(events, "chunk")[0]["tid"];
  uint64_t expect = 0;
  for (auto& e : named(events, "chunk"))
    if (e["tid"] == tid)
      CHECK(e["args"]["chunk"] == expect++);
  CHECK(expect == 1000);
  std::filesystem::remove(path);
}

TEST_CASE("a second session shares the same file and refuses another", "[trace]") {
  auto path = temp_path("shared");
  {
    trace::session a{path, "node"};
    {
      trace::session b{path, "worker"}; // same path: shared
      trace::instant("from b", "test");
      CHECK_THROWS_AS((trace::session{temp_path("other"), "x"}), rw::error);
    }
    CHECK(trace::on()); // a still records
    trace::instant("from a", "test");
  }
  auto events = read_json(path);
  CHECK(named(events, "from a").size() == 1);
  CHECK(named(events, "from b").size() == 1);
  std::filesystem::remove(path);
}

TEST_CASE("a file that cannot be written is an io_error", "[trace]") {
  try {
    trace::session s{"/nonexistent-dir/trace.json", "x"};
    FAIL("no error");
  } catch (const rw::error& e) {
    CHECK(e.code() == rw::errc::io_error);
    CHECK(std::string{e.what()}.find("/nonexistent-dir/trace.json") != std::string::npos);
  }
  CHECK_FALSE(trace::on());
}

TEST_CASE("sessions one after another each get their own events", "[trace]") {
  auto first = temp_path("first"), second = temp_path("second");
  std::atomic<bool> stop{false};
  // A thread that records throughout, across both sessions and the gap between.
  std::thread busy{[&] {
    while (!stop.load()) {
      trace::instant("busy", "test");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }};
  {
    trace::session s{first, "one"};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    trace::session s{second, "two"};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  busy.join();
  auto a = read_json(first), b = read_json(second);
  CHECK(!named(a, "busy").empty());
  CHECK(!named(b, "busy").empty());
  CHECK(named(b, "process_name")[0]["args"]["name"] == "two");
  std::filesystem::remove(first);
  std::filesystem::remove(second);
}

} // namespace rw_unit_trace
