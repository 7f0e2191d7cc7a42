// rw-node's metrics endpoint (apps/tools/metrics_server.hpp): its answers as the node
// starts, serves and stops, and what it refuses: other methods and bodies (never read),
// heads past their bound, clients past the deadline, connections past the cap, all
// while /healthz answers at once.

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>
#include <vector>

#include "apps/tools/metrics_server.hpp"
#include "apps/tools/metrics_snapshot.hpp"
#include "apps/tools/bearer_token.hpp"
#include "runtime/prometheus.hpp"
#include "tests/support/http_probe.hpp"

namespace rw_unit_metrics_server {

using namespace rw;
namespace prom = runtime::prometheus;

namespace {

struct answers {
  std::string not_ready = "starting";
  bool stopping = false;
  bool metrics_fail = false;
};

int port_of(const tools::metrics_server& s) {
  return std::stoi(s.address().substr(s.address().rfind(':') + 1));
}

tools::metrics_server::handlers handlers_for(answers& a) {
  tools::metrics_server::handlers h;
  h.metrics = [&a]() -> tools::metrics_server::exposition {
    if (a.metrics_fail)
      throw std::runtime_error("an actor is gone");
    return {std::make_shared<const std::string>("rw_up 1\n"), "rw_tail 2\n"};
  };
  h.not_ready = [&a] { return a.not_ready; };
  h.stopping = [&a] { return a.stopping; };
  return h;
}

using ms = std::chrono::milliseconds;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// /healthz answered on a connection of its own: its status and how long it took (s).
std::pair<int, double> timed_health(int port) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = test::http_get(port, "/healthz");
  return {r.status, seconds_since(t0)};
}

} // namespace

TEST_CASE("the metrics endpoint answers health as the node starts, serves and stops") {
  answers a;
  tools::metrics_server server("127.0.0.1:0", handlers_for(a));
  int port = port_of(server);
  auto get = [&](const char* path) {
    auto r = test::http_get(port, path);
    CHECK(r.closed); // every answer closes its connection
    return std::make_pair(r.status, r.body);
  };
  // Starting: alive, not ready.
  CHECK(get("/healthz") == std::make_pair(200, std::string("ok\n")));
  CHECK(get("/readyz") == std::make_pair(503, std::string("starting\n")));
  // Serving.
  a.not_ready = "";
  CHECK(get("/readyz") == std::make_pair(200, std::string("ready\n")));
  auto m = test::http_get(port, "/metrics?x=1");
  CHECK(m.status == 200);
  CHECK(m.body == "rw_up 1\nrw_tail 2\n");
  CHECK(test::field(m, "Content-Type") == prom::content_type);
  CHECK(test::field(m, "Content-Length") == "18");
  auto head = test::http_get(port, "/metrics", "", "HEAD");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(test::field(head, "Content-Length") == "18");
  CHECK(get("/other").first == 404);
  // Degraded: readiness says what is missing; a failed scrape is a 500, not a crash.
  a.not_ready = "not registered with the cluster coordinator yet";
  CHECK(get("/readyz")
        == std::make_pair(
          503, std::string("not registered with the cluster coordinator yet\n")));
  a.metrics_fail = true;
  CHECK(get("/metrics")
        == std::make_pair(500, std::string("metrics failed: an actor is gone\n")));
  // Stopping: neither alive nor ready.
  a.stopping = true;
  CHECK(get("/healthz") == std::make_pair(503, std::string("stopping\n")));
  CHECK(get("/readyz") == std::make_pair(503, std::string("stopping\n")));
  server.stop();
  server.stop(); // idempotent
  CHECK_THROWS(test::http_probe(port));
}

TEST_CASE("the metrics endpoint refuses a busy port and a malformed address") {
  answers a;
  auto h = handlers_for(a);
  tools::metrics_server first("127.0.0.1:0", h);
  try {
    tools::metrics_server second(first.address(), h);
    FAIL("a second server bound " << first.address());
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("cannot open the metrics port " + first.address()));
  }
  for (auto bad : {"127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:x1", "127.0.0.1:65536"})
    CHECK_THROWS_WITH(tools::metrics_server(bad, h),
                      Catch::Contains("--metrics wants HOST:PORT"));
}

TEST_CASE("the metrics endpoint refuses a POST and a body without reading the body") {
  answers a;
  tools::metrics_server server("127.0.0.1:0", handlers_for(a));
  int port = port_of(server);
  const size_t ten_mb = 10u << 20;
  SECTION("POST with a 10 MB body: 405 on its head, closed; the body finds no reader") {
    test::http_probe p{port};
    REQUIRE(p.send_all("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: "
                       + std::to_string(ten_mb) + "\r\n\r\n"));
    auto r = p.read_reply(ms(3000));
    CHECK(r.status == 405);
    CHECK(test::field(r, "Allow") == "GET, HEAD");
    CHECK(r.closed);
    // The server has closed its end: the body cannot all go.
    CHECK_FALSE(p.send_all(std::string(ten_mb, 'x'), ms(5000)));
  }
  SECTION("a GET announcing a body, or with Transfer-Encoding: 413, closed") {
    for (auto f : {"Content-Length: 10485760\r\n", "Transfer-Encoding: chunked\r\n"}) {
      auto r = test::http_get(port, "/metrics", f);
      CHECK(r.status == 413);
      CHECK(r.closed);
    }
    CHECK(test::http_get(port, "/metrics", "Content-Length: 0\r\n").status == 200);
  }
  SECTION("any other method: 405") {
    for (auto m : {"PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PATCH", "GETS"})
      CHECK(test::http_get(port, "/healthz", "", m).status == 405);
  }
}

TEST_CASE("the metrics endpoint refuses a request head past its bound") {
  answers a;
  tools::metrics_server server("127.0.0.1:0", handlers_for(a));
  int port = port_of(server);
  test::http_probe p{port};
  // A 1 MB header line: refused once 8 KiB are in, the connection closed.
  std::string line = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(1u << 20, 'a');
  REQUIRE(p.send_all(std::string_view(line).substr(0, 16384)));
  auto r = p.read_reply(ms(3000));
  CHECK(r.status == 431);
  CHECK(r.closed);
  // The server reads no more of it: the rest of the line, and 16 MB more (past what
  // the sockets' buffers hold), cannot all go.
  CHECK_FALSE(p.send_all(line.substr(16384) + std::string(16u << 20, 'a'), ms(5000)));
  // Many short header fields add up the same.
  std::string many = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 1000; ++i)
    many += "X-" + std::to_string(i) + ": y\r\n";
  test::http_probe q{port};
  q.send_all(many, ms(2000));
  CHECK(q.read_reply(ms(3000)).status == 431);
  // Up to the bound is fine.
  CHECK(
    test::http_get(port, "/healthz", "X-Pad: " + std::string(7000, 'p') + "\r\n").status
    == 200);
}

TEST_CASE("the metrics endpoint cuts tricklers at the deadline and health never waits") {
  answers a;
  tools::metrics_server server("127.0.0.1:0",
                               handlers_for(a)); // the default 5 s deadline
  int port = port_of(server);
  const double deadline = 5.0;
  std::atomic<bool> done{false};
  std::vector<double> cut_after(2, -1);
  std::vector<std::thread> tricklers;
  for (int i = 0; i < 2; ++i)
    tricklers.emplace_back([&, i] {
      test::http_probe p{port};
      auto t0 = std::chrono::steady_clock::now();
      std::string request = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(100, 's');
      for (size_t b = 0; b < request.size() && !done; ++b) {
        if (!p.send_all(request.substr(b, 1), ms(100)) || p.answered_or_closed(ms(500))) {
          cut_after[i] = seconds_since(t0);
          return;
        }
      }
    });
  // Meanwhile, and past the deadline: /healthz at once, every time.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> latencies;
  while (seconds_since(t0) < deadline + 1.5) {
    auto [status, took] = timed_health(port);
    if (took >= 0.1) // once more at once: a loaded machine may have paused this thread
      std::tie(status, took) = timed_health(port);
    CHECK(status == 200);
    latencies.push_back(took);
    std::this_thread::sleep_for(ms(100));
  }
  done = true;
  for (auto& t : tricklers)
    t.join();
  CHECK(*std::max_element(latencies.begin(), latencies.end()) < 0.1);
  for (auto c : cut_after) {
    CHECK(c >= deadline - 0.6); // their pace was fine: the total time was not
    CHECK(c <= deadline + 1.0);
  }
}

TEST_CASE("the metrics endpoint caps its connections and still answers health") {
  answers a;
  tools::metrics_limits l;
  l.max_connections = 4;
  l.health_reserve = 1;
  l.reserve_deadline = ms(1000);
  tools::metrics_server server("127.0.0.1:0", handlers_for(a), {std::string(), l});
  int port = port_of(server);
  std::vector<std::unique_ptr<test::http_probe>> idle;
  for (int i = 0; i < 4; ++i)
    idle.push_back(std::make_unique<test::http_probe>(port));
  std::this_thread::sleep_for(ms(200)); // taken by the server
  // Past the cap: health still answers, at once; a scrape is told to come back.
  auto [status, took] = timed_health(port);
  CHECK(status == 200);
  CHECK(took < 0.1);
  CHECK(test::http_get(port, "/metrics").status == 503);
  // The reserve taken too (a connection that says nothing): the next takes the place
  // of the oldest silent one (told 408), so health still answers at once.
  test::http_probe silent{port};
  std::this_thread::sleep_for(ms(150));
  auto [again, again_took] = timed_health(port);
  CHECK(again == 200);
  CHECK(again_took < 0.1);
  auto evicted = idle.front()->read_reply(ms(2000));
  CHECK(evicted.closed);
  CHECK(evicted.status == 408);
  idle.erase(idle.begin());
  // Every place held by a connection too young to give up: the next is shut at once.
  l.evict_idle_after = ms(60'000);
  tools::metrics_server strict("127.0.0.1:0", handlers_for(a), {std::string(), l});
  int strict_port = port_of(strict);
  std::vector<std::unique_ptr<test::http_probe>> young;
  for (int i = 0; i < 5; ++i)
    young.push_back(std::make_unique<test::http_probe>(strict_port));
  std::this_thread::sleep_for(ms(100));
  test::http_probe extra{strict_port};
  auto t0 = std::chrono::steady_clock::now();
  auto r = extra.read_reply(ms(2000));
  CHECK(r.closed);
  CHECK(r.status == 503);
  CHECK(seconds_since(t0) < 0.1);
  // The silent one goes at the reserve's deadline; then health answers again.
  CHECK(silent.read_reply(ms(3000)).closed);
  CHECK(timed_health(port).first == 200);
  // A regular connection closing frees its place.
  idle.pop_back();
  std::this_thread::sleep_for(ms(100));
  CHECK(test::http_get(port, "/metrics").status == 200);
}

TEST_CASE("idle connections from one address never keep a health probe out") {
  // 72 idle connections from one address once took every place, reserve included:
  // 80 of 80 /healthz probes were answered 503 (a liveness probe would restart a
  // healthy node). One address holds 16 regular places at most, and a newcomer takes
  // the place of the oldest idle connection.
  answers a;
  tools::metrics_server server("127.0.0.1:0", handlers_for(a));
  int port = port_of(server);
  std::vector<std::unique_ptr<test::http_probe>> idle;
  for (int i = 0; i < 16; ++i)
    idle.push_back(std::make_unique<test::http_probe>(port));
  std::this_thread::sleep_for(ms(200));
  // The address holds its 16: a scrape from it is let in for health only.
  CHECK(test::http_get(port, "/metrics").status == 503);
  for (int i = 0; i < 56; ++i)
    idle.push_back(std::make_unique<test::http_probe>(port));
  std::this_thread::sleep_for(ms(200));
  int ok = 0;
  for (int i = 0; i < 20; ++i)
    ok += timed_health(port).first == 200;
  CHECK(ok == 20);
  auto oldest = idle.front()->read_reply(ms(2000));
  CHECK(oldest.status == 408);
  CHECK(oldest.closed);
  idle.clear();
  std::this_thread::sleep_for(ms(100));
  CHECK(test::http_get(port, "/metrics").status == 200);
}

TEST_CASE("scrapes are answered from a snapshot refreshed once a second, however many") {
  std::atomic<int> asked{0};
  std::atomic<bool> ready{false};
  tools::metrics_snapshot snapshot{{[&] {
                                      ++asked;
                                      std::this_thread::sleep_for(
                                        ms(50)); // actors answering
                                      return std::string("rw_up 1\n");
                                    },
                                    [&] { return ready ? std::string() : "starting"; }},
                                   ms(1000)};
  tools::metrics_server::handlers h;
  h.metrics = [&] { return snapshot.exposition(); };
  h.not_ready = [&] { return snapshot.not_ready(); };
  h.stopping = [] { return false; };
  tools::metrics_server server("127.0.0.1:0", h);
  int port = port_of(server);
  CHECK(test::http_get(port, "/readyz").body == "starting\n");
  ready = true;
  // Eight scrapers as fast as they can for 2.5 s.
  std::atomic<int> scrapes{0}, wrong{0};
  std::atomic<double> oldest{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 8; ++i)
    scrapers.emplace_back([&] {
      while (seconds_since(t0) < 2.5) {
        // (No Catch assertions off the test's thread: they are counted, checked after.)
        auto r = test::http_get(port, "/metrics");
        auto at = r.body.find("\nrw_metrics_snapshot_age_seconds ");
        if (r.status != 200 || r.body.rfind("rw_up 1\n", 0) != 0
            || at == std::string::npos) {
          ++wrong;
          continue;
        }
        auto age = std::stod(r.body.substr(at + 33));
        for (double seen = oldest;
             age > seen && !oldest.compare_exchange_weak(seen, age);)
          ;
        ++scrapes;
      }
    });
  for (auto& t : scrapers)
    t.join();
  auto took = seconds_since(t0);
  CHECK(wrong == 0);
  CHECK(scrapes > 40);
  // Once at the start, then once a second: not once per scrape.
  CHECK(asked <= 2 + int(took));
  CHECK(oldest <= 1.5); // a second, and the refresh's own 50 ms, and a loaded machine
  auto last = test::http_get(port, "/metrics").body;
  CHECK_THAT(last, Catch::Contains("\nrw_metrics_snapshot_refreshes_total "
                                   + std::to_string(asked.load()) + "\n"));
  CHECK(test::http_get(port, "/readyz").body == "ready\n");
}

TEST_CASE("a failed snapshot is a 500 saying why, until a refresh succeeds") {
  std::atomic<bool> fail{true};
  tools::metrics_snapshot snapshot{{[&]() -> std::string {
                                      if (fail)
                                        throw std::runtime_error("an actor is gone");
                                      return "rw_up 1\n";
                                    },
                                    [] { return std::string(); }},
                                   ms(100)};
  CHECK_THROWS_WITH(snapshot.exposition(), "an actor is gone");
  fail = false;
  std::this_thread::sleep_for(ms(300));
  auto e = snapshot.exposition();
  CHECK(*e.text == "rw_up 1\n");
  CHECK_THAT(e.trailer,
             Catch::Contains("# TYPE rw_metrics_snapshot_age_seconds gauge\n"));
  snapshot.stop();
  snapshot.stop(); // idempotent
}

TEST_CASE("with a token, /metrics asks for it and health stays open") {
  answers a;
  a.not_ready = "";
  const std::string token = "a-metrics-token-0123456789";
  tools::metrics_server server("127.0.0.1:0", handlers_for(a), {token, {}});
  int port = port_of(server);
  auto none = test::http_get(port, "/metrics");
  CHECK(none.status == 401);
  CHECK(test::field(none, "WWW-Authenticate") == "Bearer realm=\"rw-node metrics\"");
  CHECK(none.body.find("rw_up") == std::string::npos);
  for (auto wrong : {"Bearer wrong-token-0123456789", "Bearer a-metrics-token-012345678",
                     "Bearer a-metrics-token-01234567890", "Basic YTpi", "Bearer",
                     "a-metrics-token-0123456789"})
    CHECK(
      test::http_get(port, "/metrics", std::string("Authorization: ") + wrong + "\r\n")
        .status
      == 401);
  auto right = test::http_get(port, "/metrics",
                              "Authorization: Bearer " + token + "\r\n");
  CHECK(right.status == 200);
  CHECK(right.body == "rw_up 1\nrw_tail 2\n");
  CHECK(
    test::http_get(port, "/metrics", "authorization: bearer  " + token + " \r\n").status
    == 200);
  CHECK(test::http_get(port, "/healthz").status == 200);
  CHECK(test::http_get(port, "/readyz").status == 200);
}

TEST_CASE("a bearer token matches only itself") {
  CHECK(tools::bearer_token_matches("Bearer abc", "abc"));
  CHECK(tools::bearer_token_matches("BEARER \t abc", "abc"));
  CHECK_FALSE(tools::bearer_token_matches("Bearer abd", "abc"));
  CHECK_FALSE(tools::bearer_token_matches("Bearer ab", "abc"));
  CHECK_FALSE(tools::bearer_token_matches("Bearerabc", "abc"));
  CHECK_FALSE(tools::bearer_token_matches("", "abc"));
  CHECK_FALSE(tools::bearer_token_matches("Bearer ", ""));
}

} // namespace rw_unit_metrics_server
