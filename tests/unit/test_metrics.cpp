// The pieces of rw-node --metrics and its logs: the Prometheus text writer, the step
// histogram, process stats and JSON log lines (the HTTP endpoint itself:
// test_metrics_server.cpp).

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/tools/logging.hpp"
#include "logic/refusal_log.hpp"
#include "actors/node/node_metrics.hpp"
#include "runtime/process_stats.hpp"
#include "runtime/prometheus.hpp"

namespace rw_unit_metrics {

using namespace rw;
namespace prom = runtime::prometheus;

TEST_CASE("the Prometheus writer escapes, types and accumulates as the format says") {
  prom::writer w;
  w.family("rw_x_total", prom::kind::counter, "a \\ help\nline");
  w.sample({{"job", "a\"b\\c\nd"}}, 3);
  w.family("rw_g", prom::kind::gauge, "g");
  w.sample({}, 0.5);
  w.family("rw_h", prom::kind::histogram, "h");
  runtime::step_histogram h;
  h.observe(0.0005); // first bucket
  h.observe(0.003);  // le=0.005
  h.observe(100);    // past 60 s: +Inf only
  w.histogram({{"job", "j"}}, h);
  auto t = w.text();
  CHECK(t.find("# HELP rw_x_total a \\\\ help\\nline\n# TYPE rw_x_total counter\n") == 0);
  CHECK(t.find("rw_x_total{job=\"a\\\"b\\\\c\\nd\"} 3\n") != std::string::npos);
  CHECK(t.find("rw_g 0.5\n") != std::string::npos);
  CHECK(t.find("rw_h_bucket{job=\"j\",le=\"0.001\"} 1\n") != std::string::npos);
  CHECK(t.find("rw_h_bucket{job=\"j\",le=\"0.0025\"} 1\n") != std::string::npos);
  CHECK(t.find("rw_h_bucket{job=\"j\",le=\"0.005\"} 2\n") != std::string::npos);
  CHECK(t.find("rw_h_bucket{job=\"j\",le=\"60\"} 2\n") != std::string::npos);
  CHECK(t.find("rw_h_bucket{job=\"j\",le=\"+Inf\"} 3\n") != std::string::npos);
  CHECK(t.find("rw_h_count{job=\"j\"} 3\n") != std::string::npos);
  CHECK(h.sum == Approx(100.0035));
}

TEST_CASE("the Prometheus writer refuses bad names and misplaced samples") {
  prom::writer w;
  CHECK_THROWS_AS(w.family("9lives", prom::kind::gauge, ""), std::invalid_argument);
  CHECK_THROWS_AS(w.family("rw-dash", prom::kind::gauge, ""), std::invalid_argument);
  CHECK_THROWS_AS(w.sample({}, 1), std::logic_error); // no family yet
  w.family("rw_a", prom::kind::gauge, "");
  CHECK_THROWS_AS(w.family("rw_a", prom::kind::gauge, ""), std::invalid_argument);
  CHECK_THROWS_AS(w.sample({{"bad-label", "x"}}, 1), std::invalid_argument);
  CHECK_THROWS_AS(w.histogram({}, runtime::step_histogram{}), std::logic_error);
}

TEST_CASE("process stats read this process from /proc") {
  auto s = runtime::read_process_stats();
  CHECK(s.rss_bytes > (1u << 20));
  CHECK(s.threads >= 1);
  CHECK(s.open_fds >= 3); // stdin, stdout, stderr
  CHECK(s.cpu_seconds >= 0);
}

TEST_CASE("JSON log lines escape the message and name the node") {
  CHECK(tools::json_escape("a\"b\\c\nd\te\x01") == "a\\\"b\\\\c\\nd\\te\\u0001");
  // Bytes that are not UTF-8 (a stranger's job name) become U+FFFD: the line stays JSON.
  CHECK(tools::json_escape("job\xff\xfe") == "job\xef\xbf\xbd\xef\xbf\xbd");
  auto dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  auto file = dir + "/rw-unit-log-" + std::to_string(::getpid()) + ".json";
  std::remove(file.c_str());
  auto before = spdlog::default_logger();
  tools::setup_node_logging({file, "json", 1, 2, "info"}, "node \"7\" 100%");
  spdlog::info("job {} stopped by shell {}", "a/b", "10.0.0.1:5\"x");
  spdlog::warn("hello from job '{}'", "t\xc3(\n");
  spdlog::debug("not at info");
  spdlog::default_logger()->flush();
  spdlog::set_default_logger(before);
  std::ifstream in{file};
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    REQUIRE(nlohmann::json::accept(line));
    lines.push_back(nlohmann::json::parse(line));
  }
  REQUIRE(lines.size() == 2); // debug is below the level
  CHECK(lines[0]["level"] == "info");
  CHECK(lines[0]["node"] == "node \"7\" 100%");
  CHECK(lines[0]["msg"] == "job a/b stopped by shell 10.0.0.1:5\"x");
  auto time = lines[0]["time"].get<std::string>(); // 2026-11-27T11:00:00.000+00:00
  REQUIRE(time.size() == 29);
  CHECK(time[10] == 'T');
  CHECK(time[19] == '.');
  CHECK(time[26] == ':');
  CHECK(lines[1]["level"] == "warning");
  CHECK(lines[1]["msg"] == "hello from job 't\xef\xbf\xbd(\n'");
  std::remove(file.c_str());
  CHECK_THROWS_WITH(
    tools::setup_node_logging({"/proc/no/such/dir/log", "text", 1, 2, "info"}, "n"),
    Catch::Contains("cannot write the log file --log-file /proc/no/such/dir/log"));
}

TEST_CASE("the log file rotates at its size and keeps the files asked for") {
  auto dir = std::string("/tmp/rw-unit-rotate-") + std::to_string(::getpid());
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  auto before = spdlog::default_logger();
  tools::setup_node_logging({dir + "/node.log", "text", 1, 2, "info"}, "n");
  std::string line(1000, 'x');
  for (int i = 0; i < 4000; ++i) // about 4 MiB: rotates three times at 1 MiB
    spdlog::info("{} {}", i, line);
  spdlog::default_logger()->flush();
  spdlog::set_default_logger(before);
  auto exists = [](const std::string& p) { return std::ifstream(p).good(); };
  CHECK(exists(dir + "/node.log"));
  CHECK(exists(dir + "/node.1.log"));
  CHECK(exists(dir + "/node.2.log"));
  CHECK_FALSE(exists(dir + "/node.3.log"));
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("repeated refusals of one peer are logged once a minute, with a count") {
  rw::actors::detail::refusal_log log{std::chrono::seconds(60)};
  auto t0 = rw::actors::detail::refusal_log::clock::now();
  CHECK(log.admit("node-a/proof", t0) == std::optional<uint64_t>{0});
  for (int i = 1; i <= 59; ++i) // one try a second: not logged, counted
    CHECK_FALSE(log.admit("node-a/proof", t0 + std::chrono::seconds(i)));
  CHECK(log.admit("node-b/proof", t0 + std::chrono::seconds(5))
        == std::optional<uint64_t>{0});
  CHECK(log.admit("node-a/proof", t0 + std::chrono::seconds(60))
        == std::optional<uint64_t>{59});
  CHECK_FALSE(log.admit("node-a/proof", t0 + std::chrono::seconds(61)));
  // Many distinct peers: the book stays bounded.
  for (size_t i = 0; i < 3 * rw::actors::detail::refusal_log::max_keys; ++i)
    log.admit("peer-" + std::to_string(i), t0 + std::chrono::seconds(120));
  CHECK(log.keys() <= rw::actors::detail::refusal_log::max_keys + 1);
}

TEST_CASE("the throughput line gives rates over its interval and the node's state") {
  rw::actors::node_totals before, now;
  before.bytes_in = 0;
  now.bytes_in = 4u << 20; // 4 MiB in 2 s
  now.bytes_out = 2u << 20;
  now.steps = 300;
  now.connections = 3;
  now.jobs = 1;
  auto line = rw::actors::throughput_line(before, now, 2.0);
  CHECK_THAT(line,
             Catch::StartsWith("throughput over 2 s: in 2.0 MiB/s, out 1.0 MiB/s, "
                               "150 chunk steps/s; 3 connections, 1 live jobs, RSS "));
  CHECK_THAT(line, !Catch::Contains("did not answer"));
  // A restarted shard's counters start again: no negative rate.
  auto after_restart = rw::actors::throughput_line(now, before, 2.0);
  CHECK_THAT(after_restart, Catch::Contains("in 0.0 MiB/s"));
  now.missing = 1;
  CHECK_THAT(rw::actors::throughput_line(before, now, 2.0),
             Catch::Contains("(1 actors did not answer in time"));
}

} // namespace rw_unit_metrics
