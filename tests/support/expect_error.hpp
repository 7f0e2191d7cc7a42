#pragma once
// The check bad-input tests make of a node's answer: the next frame is an error with
// the expected code (in its header and its payload); returns its message.

#include <string>

#include <catch2/catch.hpp>

#include "tests/support/raw_client.hpp"

namespace rw::testing {

inline std::string expect_error(raw_client& c, errc code) {
  auto f = c.read_frame();
  REQUIRE(f.has_value());
  REQUIRE(f->header.kind == protocol::frame_kind::error);
  auto e = f->error();
  INFO(e.message);
  CHECK(e.code == code);
  CHECK(f->header.error_code == code);
  return e.message;
}

} // namespace rw::testing
