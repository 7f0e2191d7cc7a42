#pragma once
// What `rw-bench comm --json` printed, parsed (nlohmann-json): tests read its fields and
// never match substrings of it.

#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace rw::testing {

/// The JSON object rw-bench printed: the last line of `out` that starts with '{'. The
/// test fails (REQUIRE) if there is none or it is not JSON.
inline nlohmann::json bench_json(const std::string& out) {
  INFO("rw-bench printed:\n" << out);
  auto end = out.size();
  while (end > 0) {
    auto begin = out.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    auto line = out.substr(begin, end - begin);
    if (!line.empty() && line.front() == '{') {
      REQUIRE(nlohmann::json::accept(line));
      return nlohmann::json::parse(line);
    }
    end = begin == 0 ? 0 : begin - 1;
  }
  FAIL("no JSON line");
  return {};
}

} // namespace rw::testing
