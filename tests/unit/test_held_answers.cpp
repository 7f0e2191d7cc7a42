// The shard's --test-delay-answers hook (logic/held_answers): held updates go out once
// due, a tensor's frames in the order they were held, a copy of the payload (the chunk's
// parameters may change meanwhile), and a job that ends drops what it had held.

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "logic/held_answers.hpp"
#include "tests/support/recording_connection.hpp"

namespace rw_unit_held_answers {

using namespace rw;
using ms = std::chrono::milliseconds;

namespace {

protocol::frame_header update(uint32_t job, uint32_t tensor, uint32_t chunk) {
  protocol::frame_header h;
  h.kind = protocol::frame_kind::update;
  h.job_id = job;
  h.tensor_id = tensor;
  h.chunk_index = chunk;
  return h;
}

} // namespace

TEST_CASE("held answers go out once due, each tensor's in order, from a copy",
          "[held_answers]") {
  actors::detail::held_answers held{{{2, ms(100)}, {5, ms(10)}}};
  REQUIRE(held.active());
  CHECK(held.shortest() == ms(10));
  CHECK(held.delay(2) == ms(100));
  CHECK(held.delay(3) == ms(0));
  auto conn = std::make_shared<testing::recording>();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> params{1, 2, 3};
  held.hold(conn, update(1, 2, 0), params.data(), sizeof(float) * 3, t0);
  held.hold(conn, update(1, 2, 1), params.data(), sizeof(float) * 3, t0);
  held.hold(conn, update(1, 5, 7), nullptr, 0, t0);
  params[0] = 99; // the chunk moves on: what was held is what was answered then
  CHECK(held.send_due(t0 + ms(9)) == 0);
  CHECK(held.send_due(t0 + ms(10)) == 1); // tensor 5's, held for less
  CHECK(conn->chunks(1) == std::vector<uint32_t>{7});
  CHECK(held.send_due(t0 + ms(99)) == 0);
  CHECK(held.send_due(t0 + ms(100)) == 2);
  CHECK(conn->chunks(3) == std::vector<uint32_t>{7, 0, 1});
  CHECK(held.size() == 0);
  // The payload sent was the copy made when it was held, not the caller's memory.
  CHECK(conn->writes[1].payloads[0] != static_cast<void*>(params.data()));
}

TEST_CASE("a job that ends drops the answers held for it, not another's",
          "[held_answers]") {
  actors::detail::held_answers held{{{0, ms(50)}}};
  auto conn = std::make_shared<testing::recording>();
  auto t0 = std::chrono::steady_clock::now();
  held.hold(conn, update(1, 0, 0), nullptr, 0, t0);
  held.hold(conn, update(2, 0, 4), nullptr, 0, t0);
  held.drop(1);
  CHECK(held.size() == 1);
  CHECK(held.send_due(t0 + ms(50)) == 1);
  CHECK(conn->chunks(1) == std::vector<uint32_t>{4});
}

TEST_CASE("with no delays the hook is off", "[held_answers]") {
  actors::detail::held_answers held;
  CHECK_FALSE(held.active());
  CHECK(held.shortest() == ms(0));
  CHECK(held.send_due(std::chrono::steady_clock::now()) == 0);
}

} // namespace rw_unit_held_answers
