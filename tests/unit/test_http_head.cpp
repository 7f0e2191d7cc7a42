// The metrics endpoint's request-head parser (apps/tools/http_head.hpp): what it takes,
// what it refuses with which status, and that its answers do not change as bytes come.

#include <catch2/catch.hpp>

#include <string>

#include "apps/tools/http_head.hpp"

namespace rw_unit_http_head {

namespace http = rw::tools::http;

namespace {

int status_of(std::string_view bytes, size_t max = http::max_head_bytes) {
  auto r = http::parse_head(bytes, max);
  if (std::holds_alternative<http::incomplete>(r))
    return 0;
  if (auto* b = std::get_if<http::bad>(&r)) {
    CHECK_FALSE(b->why.empty());
    return b->status;
  }
  return 200;
}

} // namespace

TEST_CASE("the request-head parser takes GET and HEAD with their fields") {
  std::string text =
    "\r\nGET /metrics?a=b HTTP/1.1\r\nHost: x\r\nauthorization:  Bearer t0k "
    "\r\nContent-Length: 000\r\n\r\nbody bytes never looked at";
  auto r = http::parse_head(text);
  auto* req = std::get_if<http::request>(&r);
  REQUIRE(req);
  CHECK(req->method == "GET");
  CHECK(req->target == "/metrics?a=b");
  CHECK(http::target_path(req->target) == "/metrics");
  CHECK(req->authorization == "Bearer t0k");
  CHECK(req->head_bytes == text.find("body"));
  auto h = http::parse_head("HEAD /healthz HTTP/1.0\n\n");
  REQUIRE(std::get_if<http::request>(&h));
  CHECK(std::get<http::request>(h).method == "HEAD");
  CHECK(std::get<http::request>(h).authorization.empty());
}

TEST_CASE("the request-head parser refuses, with the status that says why") {
  CHECK(status_of("POST /metrics HTTP/1.1\r\n\r\n") == 405);
  CHECK(status_of("P") == 405); // said as soon as the method cannot be GET or HEAD
  CHECK(status_of("GETS / HTTP/1.1\r\n\r\n") == 405);
  CHECK(status_of("GE / HTTP/1.1\r\n\r\n") == 405);
  CHECK(status_of(" GET / HTTP/1.1\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\nContent-Length: 5\r\n") == 413); // at its line
  CHECK(status_of("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") == 413);
  CHECK(status_of("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/2.0\r\n\r\n") == 505);
  CHECK(status_of("GET / HTTP/1.1 x\r\n\r\n") == 400);
  CHECK(status_of("GET /\r\n\r\n") == 400);
  CHECK(status_of("GET http://x/ HTTP/1.1\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\n folded\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\nNo colon\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n") == 400);
  CHECK(status_of("GET / HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n")
        == 400);
  // The bound: the head must end within it; a request that does is fine.
  std::string big = "GET / HTTP/1.1\r\nX: " + std::string(100, 'x') + "\r\n\r\n";
  CHECK(status_of(big, big.size()) == 200);
  CHECK(status_of(big, big.size() - 1) == 431);
  CHECK(status_of(std::string(20000, 'G').insert(0, "GET /"), 8192) == 431);
  CHECK(status_of("GET / HTTP/1.1\r\nX: y\r\n") == 0); // more to come
}

TEST_CASE("the request-head parser's answer does not change as bytes come") {
  for (std::string text :
       {"GET /m HTTP/1.1\r\nA: b\r\n\r\n", "HEAD / HTTP/1.0\n\n",
        "POST / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nContent-Length: 9\r\n\r\n",
        "GET / HTTP/3.0\r\n\r\n"}) {
    auto whole = status_of(text);
    CAPTURE(text);
    bool decided = false;
    for (size_t n = 0; n <= text.size(); ++n) {
      auto s = status_of(text.substr(0, n));
      if (decided)
        CHECK(s == whole);
      decided = decided || s != 0;
    }
    CHECK(decided);
  }
}

} // namespace rw_unit_http_head
