// A shard's held answers (logic/shard_answers): what is sent when, to whom, in
// which order, and with which payload.

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "logic/shard_answers.hpp"
#include "tests/support/recording_connection.hpp"

namespace rw_unit_shard_answers {

using rw::actors::detail::shard_answers;
using rw::protocol::frame_header;

namespace {

using rw::testing::recording;

frame_header chunk(uint32_t c) {
  frame_header h;
  h.chunk_index = c;
  return h;
}

} // namespace

TEST_CASE("answers: sent at once outside a holding scope", "[answers]") {
  shard_answers a;
  auto w = std::make_shared<recording>();
  CHECK(a.send(w, chunk(1)));
  CHECK(a.send(w, chunk(2)));
  REQUIRE(w->writes.size() == 2);
  CHECK(w->writes[0].chunks == std::vector<uint32_t>{1});
}

TEST_CASE("answers: held, then one write per connection in order", "[answers]") {
  shard_answers a;
  auto w0 = std::make_shared<recording>();
  auto w1 = std::make_shared<recording>();
  float params[4] = {};
  {
    shard_answers::holding scope{a};
    a.send(w0, chunk(0), iovec{params, sizeof(params)});
    a.send(w1, chunk(0), iovec{params, sizeof(params)});
    a.send(w0, chunk(1));
    {
      shard_answers::holding inner{a}; // nested: only the outermost flushes
      a.send(w1, chunk(1));
    }
    CHECK(w0->writes.empty());
    CHECK(w1->writes.empty());
    CHECK(a.points_at(params));
  }
  REQUIRE(w0->writes.size() == 1);
  REQUIRE(w1->writes.size() == 1);
  CHECK(w0->writes[0].chunks == std::vector<uint32_t>{0, 1});
  CHECK(w0->writes[0].payloads == std::vector<void*>{params, nullptr});
  CHECK(w1->writes[0].chunks == std::vector<uint32_t>{0, 1});
  CHECK_FALSE(a.points_at(params));
}

TEST_CASE("answers: a flush inside the scope sends what is held so far", "[answers]") {
  shard_answers a;
  auto w = std::make_shared<recording>();
  float p0[2] = {}, p1[2] = {};
  shard_answers::holding scope{a};
  a.send(w, chunk(0), iovec{p0, sizeof(p0)});
  CHECK(a.points_at(p0));
  CHECK_FALSE(a.points_at(p1));
  a.flush(); // as before a step changes p0
  REQUIRE(w->writes.size() == 1);
  CHECK_FALSE(a.points_at(p0));
  a.send(w, chunk(1), iovec{p1, sizeof(p1)});
  CHECK(w->writes.size() == 1); // still holding
}

TEST_CASE("answers: replica acks, first one flags the flush", "[answers]") {
  shard_answers a;
  auto home0 = std::make_shared<recording>();
  auto home1 = std::make_shared<recording>();
  CHECK(a.add_replica_ack(home0, chunk(5)));
  CHECK_FALSE(a.add_replica_ack(home1, chunk(6)));
  CHECK_FALSE(a.add_replica_ack(home0, chunk(7)));
  a.flush_replica_acks();
  REQUIRE(home0->writes.size() == 1);
  CHECK(home0->writes[0].chunks == std::vector<uint32_t>{5, 7});
  REQUIRE(home1->writes.size() == 1);
  CHECK(home1->writes[0].chunks == std::vector<uint32_t>{6});
  CHECK(a.add_replica_ack(home0, chunk(8))); // the list was emptied
}

} // namespace rw_unit_shard_answers
