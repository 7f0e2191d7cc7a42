// The metrics endpoint's request-head parser (apps/tools/http_head.hpp) over any bytes:
// it never reads past them (each prefix is parsed from a copy of its own size, so
// AddressSanitizer sees an over-read), a request's fields lie inside its head and are
// what they claim (GET or HEAD, a path of visible ASCII, an Authorization value without
// line breaks), a refusal has one of its statuses and a reason, and the answer does not
// change as more bytes arrive or with a larger bound once it is given.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "apps/tools/http_head.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace http = rw::tools::http;

namespace {

// A description of a result that two parses can be compared by.
std::string describe(const http::parse_result& r, const char* base) {
  if (std::holds_alternative<http::incomplete>(r))
    return "incomplete";
  if (auto* b = std::get_if<http::bad>(&r))
    return "bad " + std::to_string(b->status);
  auto& q = std::get<http::request>(r);
  auto offset = [&](std::string_view v) { return std::to_string(v.data() - base); };
  return "request " + std::string(q.method) + " " + std::string(q.target) + " ["
         + std::string(q.authorization) + "] head " + std::to_string(q.head_bytes)
         + " at " + offset(q.target);
}

void check(const http::parse_result& r, const char* data, size_t size, size_t max) {
  if (std::holds_alternative<http::incomplete>(r)) {
    if (size >= max)
      rw::fuzz::fail("incomplete with the bound reached");
    return;
  }
  if (auto* b = std::get_if<http::bad>(&r)) {
    static const int statuses[] = {400, 405, 413, 431, 505};
    if (std::find(std::begin(statuses), std::end(statuses), b->status)
        == std::end(statuses))
      rw::fuzz::fail("a refusal with status " + std::to_string(b->status));
    if (b->why.empty())
      rw::fuzz::fail("a refusal without a reason");
    if (b->status == 431 && size < max)
      rw::fuzz::fail("431 before the bound was reached");
    return;
  }
  auto& q = std::get<http::request>(r);
  if (q.head_bytes == 0 || q.head_bytes > size || q.head_bytes > max)
    rw::fuzz::fail("a head of " + std::to_string(q.head_bytes) + " bytes in "
                   + std::to_string(size) + " (bound " + std::to_string(max) + ")");
  if (data[q.head_bytes - 1] != '\n')
    rw::fuzz::fail("a head that does not end with a line feed");
  auto inside = [&](std::string_view v) {
    return v.empty() || (v.data() >= data && v.data() + v.size() <= data + q.head_bytes);
  };
  if (!inside(q.method) || !inside(q.target) || !inside(q.authorization))
    rw::fuzz::fail("a field outside the head");
  if (q.method != "GET" && q.method != "HEAD")
    rw::fuzz::fail("a request with method " + std::string(q.method));
  if (q.target.empty() || q.target.front() != '/')
    rw::fuzz::fail("a target that is not a path");
  for (char c : q.target)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      rw::fuzz::fail("a target with a byte outside visible ASCII");
  for (char c : q.authorization)
    if (c == '\r' || c == '\n' || c == '\0')
      rw::fuzz::fail("an Authorization value with a line break or NUL");
  if (!q.authorization.empty()
      && (q.authorization.front() == ' ' || q.authorization.back() == ' '
          || q.authorization.front() == '\t' || q.authorization.back() == '\t'))
    rw::fuzz::fail("an Authorization value not trimmed");
}

// Parses a copy of exactly `size` bytes, checks the result, and describes it.
std::string parse_copy(const uint8_t* data, size_t size, size_t max) {
  std::vector<char> copy(data, data + size);
  auto r = http::parse_head({copy.data(), copy.size()}, max);
  check(r, copy.data(), copy.size(), max);
  return describe(r, copy.data());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t max = http::max_head_bytes;
  auto whole = parse_copy(data, size, max);
  // Prefixes: every one of a short input, else a spread of them.
  std::vector<size_t> cuts;
  if (size <= 256) {
    for (size_t n = 0; n < size; ++n)
      cuts.push_back(n);
  } else {
    for (size_t i = 0; i < 32; ++i)
      cuts.push_back(size * i / 32);
  }
  for (size_t n : cuts) {
    auto part = parse_copy(data, n, max);
    if (part != "incomplete" && part != whole)
      rw::fuzz::fail("the first " + std::to_string(n) + " bytes give '" + part
                     + "', all of them '" + whole + "'");
  }
  // A smaller bound: what it takes, the larger one takes the same.
  const size_t small = 64;
  auto bounded = parse_copy(data, size, small);
  if (bounded.rfind("request", 0) == 0 && bounded != whole)
    rw::fuzz::fail("bound 64 gives '" + bounded + "', bound 8192 '" + whole + "'");
  if (bounded.rfind("bad", 0) == 0 && bounded != "bad 431" && bounded != whole)
    rw::fuzz::fail("bound 64 gives '" + bounded + "', bound 8192 '" + whole + "'");
  return 0;
}
