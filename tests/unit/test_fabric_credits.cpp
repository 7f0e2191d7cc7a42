// Fabric credits in batches (transports/fabric/owed_credits.hpp, connection.hpp): a
// receiver owes the slots it gives back and sends them batch_at() at a time, or all at
// once when it holds no frame of the peer's any more; an older peer (creditBatch 0) gets one per message;
// and the credit messages a hostile peer can send.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "transports/fabric/owed_credits.hpp"
#include "tests/support/fabric_pair.hpp"

namespace rw_unit_fabric_credits {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;
using namespace rw_test::fabric_pair;

namespace {

// Sends frames [first, first + n) from `c`, each 64 floats.
void send_frames(fabric::connection& c, uint32_t first, uint32_t n) {
  std::vector<float> grad(64, 1.0f);
  iovec iov{grad.data(), grad.size() * sizeof(float)};
  for (uint32_t i = first; i < first + n; ++i)
    REQUIRE(c.send(push_of(i, iov.iov_len), &iov, 1));
}

// Drops the first `n` frames the recorder holds (their slots go back).
void drop_held(recorder& r, size_t n) {
  std::lock_guard<std::mutex> guard{r.mtx};
  r.held.erase(r.held.begin(), r.held.begin() + static_cast<long>(n));
}

} // namespace

TEST_CASE("fabric: owed slots are due batch_at() at a time, or once nothing holds them "
          "back",
          "[fabric]") {
  fabric::owed_credits owed;
  auto slots = [](const fabric::owed_credits::batch& b) {
    return std::vector<uint16_t>(b.slots.begin(), b.slots.begin() + long(b.n));
  };
  owed.set_batch_at(4);
  for (int i = 0; i < 6; ++i)
    owed.hold(); // six frames held
  CHECK(owed.release(1).n == 0);
  CHECK(owed.release(2).n == 0);
  CHECK(owed.release(3).n == 0);
  CHECK(slots(owed.release(4)) == std::vector<uint16_t>{1, 2, 3, 4});
  CHECK(owed.release(5).n == 0); // one frame still held
  owed.hold();                   // a round of the endpoint's thread
  CHECK(owed.release(6).n == 0); // the last frame, but the round holds them back
  CHECK(slots(owed.unhold()) == std::vector<uint16_t>{5, 6});
  owed.hold();
  CHECK(owed.unhold().n == 0); // a round that gave nothing back: nothing due
  owed.set_batch_at(1000);
  CHECK(owed.batch_at() == fabric::credit_batch_accepted);
  owed.set_batch_at(0);
  CHECK(owed.batch_at() == 1);
}

TEST_CASE("fabric: slots go back batch_at() to a credit message, and none is withheld "
          "once the receiver holds no frame of the peer's",
          "[fabric]") {
  pair_fixture f{64};
  const uint32_t at = f.ba->batch_at();
  REQUIRE(at == std::clamp(f.ba->slot_count() / 8, 1u, fabric::credit_batch_accepted));
  REQUIRE(at > 1);
  f.rb.keep = true; // the receiver holds every frame until the test drops it

  SECTION("four batches' worth") {
    const uint32_t n = 4 * at;
    send_frames(*f.ab, 0, n);
    REQUIRE(f.pump([&] { return f.rb.held.size() == n; }));
    CHECK(f.ba->credit_messages() == 0); // every slot still held
    drop_held(f.rb, n - 1);
    CHECK(f.ba->credit_messages() == 3); // three full batches; at - 1 still owed
    CHECK(f.ba->credits_given() == 3 * at);
    drop_held(f.rb, 1); // the last frame held: everything owed goes (at once, or when
                        // the endpoint's round that delivered it ends)
    REQUIRE(f.pump([&] { return f.ba->credit_messages() == 4; }));
    CHECK(f.ba->credits_given() == n);
  }
  SECTION("fewer than a batch") {
    send_frames(*f.ab, 0, 3);
    REQUIRE(f.pump([&] { return f.rb.held.size() == 3; }));
    drop_held(f.rb, 1);
    CHECK(f.ba->credit_messages() == 0); // owed while two frames are held
    drop_held(f.rb, 2);
    REQUIRE(f.pump([&] { return f.ba->credit_messages() == 1; }));
    CHECK(f.ba->credits_given() == 3);
  }
  // The sender has every slot back: a whole window goes through without waiting.
  f.rb.keep = false;
  const auto before = f.rb.headers.size();
  send_frames(*f.ab, 100, f.ba->slot_count());
  REQUIRE(f.pump([&] { return f.rb.headers.size() == before + f.ba->slot_count(); }));
  CHECK(f.ab->is_open());
  CHECK(f.ba->is_open());
}

TEST_CASE("fabric: frames given back while the endpoint delivers them go back in "
          "batches too",
          "[fabric]") {
  pair_fixture f{64};
  const uint32_t n = 8 * f.ba->slot_count(); // many windows, each slot reused
  send_frames(*f.ab, 0, n);
  REQUIRE(f.pump([&] { return f.rb.headers.size() == n; }));
  // Each round of completions owes its slots and sends them when it ends; how many go
  // in one message depends on how many completions a round found.
  REQUIRE(f.pump([&] { return f.ba->credits_given() == n; }));
  CHECK(f.ba->credit_messages() <= n);
  CHECK(f.ba->credit_messages() >= n / fabric::credit_batch_accepted);
  CHECK(f.ab->is_open());
}

TEST_CASE("fabric: a peer whose offer names no credit batch gets one slot per message",
          "[fabric]") {
  pair_fixture f{64};
  // This build says on the wire what it takes.
  fabric_offer back;
  std::string why;
  auto wire = encode(f.ba->offer());
  REQUIRE(decode(wire.data(), wire.size(), back, why) == errc::ok);
  CHECK(back.credit_batch == fabric::credit_batch_accepted);
  CHECK(back.frame_notices);
  auto ac = f.a->open("c", 4096);
  auto ca = f.b->open("a-old", 4096);
  ac->bind(ca->offer());
  auto old = ac->offer();
  old.credit_batch = 0; // as an older build's offer decodes
  ca->bind(old);
  CHECK(ca->batch_at() == 1);
  f.a->adopt(ac);
  f.b->adopt(ca);
  f.rb.keep = true;
  send_frames(*ac, 0, 16);
  REQUIRE(f.pump([&] { return f.rb.held.size() == 16; }));
  drop_held(f.rb, 16);
  CHECK(ca->credit_messages() == 16);
  CHECK(ca->credits_given() == 16);
  f.rb.keep = false;
  send_frames(*ac, 16, ca->slot_count()); // every slot came back
  REQUIRE(f.pump([&] { return f.rb.headers.size() == 16 + ca->slot_count(); }));
  CHECK(ac->is_open());
}

TEST_CASE("fabric: credit messages a peer may not send close its connection",
          "[fabric]") {
  pair_fixture f;
  rogue_peer rogue{f, rogue_peer::as::peer};
  const auto index = rogue.offer.conn_index; // b's index of its connection to the rogue
  auto& c = *rogue.conn;

  SECTION("an odd payload") {
    REQUIRE(rogue.credit(fabric::immediate(index, 0), 3) == 0);
    REQUIRE(f.pump([&] { return !f.rb.closed.empty(); }));
    CHECK(c.close_code() == errc::bad_frame);
    CHECK_THAT(c.close_reason(), Catch::Contains("a credit message of 3 payload"));
  }
  SECTION("payloads longer than the receive buffer are counted and dropped, the "
          "connection goes on") {
    // (The tcp provider reports the first as truncated; what it makes of the next ones
    // from that peer is its own affair: none of them is taken as a credit.)
    for (int i = 0; i < 3; ++i)
      REQUIRE(rogue.credit(fabric::immediate(index, 5), 100) == 0);
    REQUIRE(f.pump([&] { return f.b->failed_receives() >= 1; }));
    std::vector<float> grad(16, 1.0f);
    iovec iov{grad.data(), grad.size() * sizeof(float)};
    REQUIRE(f.ab->send(push_of(1, iov.iov_len), &iov, 1));
    REQUIRE(f.pump([&] { return f.rb.headers.size() == 1; }));
    CHECK(f.ba->is_open());
    CHECK(f.rb.closed.empty());
  }
  SECTION("a slot b never wrote") {
    REQUIRE(rogue.credit(fabric::immediate(index, 5), 0) == 0);
    REQUIRE(f.pump([&] { return !f.rb.closed.empty(); }));
    CHECK_THAT(c.close_reason(),
               Catch::Contains("gave back a slot it had not been sent (slots 5)"));
  }
  SECTION("a batch naming slots far out of range") {
    std::fill(rogue.junk.begin(), rogue.junk.end(), std::byte{0xff}); // slot 65535
    REQUIRE(rogue.credit(fabric::immediate(index, 1), 4) == 0);
    REQUIRE(f.pump([&] { return !f.rb.closed.empty(); }));
    CHECK_THAT(c.close_reason(), Catch::Contains("(slots 1 65535 65535)"));
  }
  SECTION("a slot given back twice in one message") {
    // b writes one frame into the rogue's slot 0; the rogue gives slot 0 back twice in
    // one message: the first is taken, the second closes the connection.
    std::vector<float> grad(16, 1.0f);
    iovec iov{grad.data(), grad.size() * sizeof(float)};
    REQUIRE(c.send(push_of(0, iov.iov_len), &iov, 1));
    std::fill(rogue.junk.begin(), rogue.junk.end(), std::byte{0});
    REQUIRE(rogue.credit(fabric::immediate(index, 0), 2) == 0); // slots 0 and 0
    REQUIRE(f.pump([&] { return !f.rb.closed.empty(); }));
    CHECK_THAT(c.close_reason(), Catch::Contains("(slots 0 0)"));
  }
  CHECK(f.ab->is_open()); // the pair is not the one that lied
  CHECK(f.ba->is_open());
}

// Issue 59, finding 5: a credit message names a connection by its index, which any
// endpoint can write; a stranger's credit for ba once freed slots that a's frames still
// filled (b would overwrite them). The provider names each message's sender now.
TEST_CASE("fabric: a credit message from an endpoint that is not the connection's peer "
          "is ignored",
          "[fabric]") {
  pair_fixture f;
  rogue_peer rogue{f}; // a stranger to b
  const auto index = rogue.offer.conn_index;
  // b sends a frame into a's slot 0, which a holds: a's credit for it has not come.
  f.ra.keep = true;
  std::vector<float> grad(16, 1.0f);
  iovec iov{grad.data(), grad.size() * sizeof(float)};
  REQUIRE(f.ba->send(push_of(0, iov.iov_len), &iov, 1));
  REQUIRE(f.pump([&] { return f.ra.held.size() == 1; }));
  // The stranger gives slot 0 back twice as if it were a: before, the first was taken
  // and the second closed ba ("slots 0 0").
  std::fill(rogue.junk.begin(), rogue.junk.end(), std::byte{0});
  REQUIRE(rogue.credit(fabric::immediate(index, 0), 2) == 0);
  REQUIRE(f.pump([&] { return f.b->bad_immediates() == 1; }));
  CHECK(f.ba->is_open());
  CHECK(f.rb.closed.empty());
  // a's own credit still counts once a lets the frame go, and frames go on.
  {
    std::lock_guard<std::mutex> guard{f.ra.mtx};
    f.ra.keep = false;
    f.ra.held.clear();
  }
  for (uint32_t i = 1; i < 20; ++i)
    REQUIRE(f.ba->send(push_of(i, iov.iov_len), &iov, 1));
  REQUIRE(f.pump([&] { return f.ra.headers.size() == 20; }));
  CHECK(f.ba->is_open());
}

} // namespace rw_unit_fabric_credits
