// A job's ranks on a node as a plain class (logic/rank_book.hpp), without a node.

#include <catch2/catch.hpp>

#include "logic/rank_book.hpp"

namespace rw_unit_rank_book {

using namespace rw::actors::detail;
using namespace std::chrono_literals;
using leaving = rank_book::leaving;

namespace {
std::vector<std::byte> nonce(uint8_t b) {
  return std::vector<std::byte>(24, std::byte{b});
}
auto everyone = [](uint32_t) { return true; };
} // namespace

TEST_CASE("a rank joins once while connected, and again after it went", "[rank_book]") {
  rank_book book{3};
  REQUIRE(book.size() == 3);
  CHECK(book.status(1) == rank_status::absent);
  auto j = book.join(1, "10.0.0.1:5000", 11);
  CHECK_FALSE(j.refused);
  CHECK(j.was == rank_status::absent);
  CHECK(book.status(1) == rank_status::live);
  CHECK(book.token(1) == 11);
  CHECK(book.peer(1) == "10.0.0.1:5000");
  // A second worker for the same rank is refused; nothing of the first changes.
  j = book.join(1, "10.0.0.2:5000", 12);
  CHECK(j.refused);
  CHECK(j.was == rank_status::live);
  CHECK(book.token(1) == 11);
  CHECK(book.peer(1) == "10.0.0.1:5000");
  CHECK(std::string(to_string(book.status(1))) == "live");
}

TEST_CASE("a rank gone without bye is away until it joins again or its window closes",
          "[rank_book]") {
  rank_book book{2};
  auto t0 = rank_book::clock::now();
  book.join(0, "h:1", 1, t0);
  auto out = book.leave(0, false, "connection reset", t0);
  CHECK(out.what == leaving::away);
  CHECK(out.departure == 1);
  CHECK(book.status(0) == rank_status::away);
  CHECK(book.away_reason(0) == "connection reset");
  CHECK(book.still_away(0, 1));
  CHECK_FALSE(book.still_away(0, 2));
  CHECK_FALSE(book.still_away(7, 1)); // no such rank
  // Back 250 ms later: told how long it was away and why; the old window is void.
  auto j = book.join(0, "h:2", 2, t0 + 250ms);
  CHECK(j.was == rank_status::away);
  CHECK(j.away_for == 250ms);
  CHECK(j.away_reason == "connection reset");
  CHECK_FALSE(book.still_away(0, 1));
  // Away again: a window of its own, the first one's close does not count.
  out = book.leave(0, false, "timeout", t0 + 1s);
  CHECK(out.departure == 2);
  CHECK_FALSE(book.still_away(0, 1));
  CHECK(book.still_away(0, 2));
  auto c = book.count(everyone);
  CHECK(c.ranks == 2);
  CHECK(c.live == 0);
  CHECK(c.away == 1);
}

TEST_CASE("a bye on one of several connections keeps the rank, the last one leaves it",
          "[rank_book]") {
  rank_book book{2};
  book.join(0, "h:1", 5);
  book.join(1, "h:2", 6);
  using v = attach_ledger::verdict;
  REQUIRE(book.attach(0, nonce(1)) == v::taken); // a second endpoint: 2 connections
  CHECK(book.attach(0, nonce(1)) == v::replayed);
  CHECK(book.attaches(0) == 1);
  CHECK(book.leave(0, true, "").what == leaving::still_connected);
  CHECK(book.status(0) == rank_status::live);
  CHECK(book.leave(0, true, "").what == leaving::left);
  CHECK(book.status(0) == rank_status::left);
  CHECK(book.leave(0, true, "").what == leaving::ignored); // gone already
  CHECK_FALSE(book.all_left(everyone));
  // Rank 1 belongs to another rack (a hierarchical job's part): this node's all left.
  CHECK(book.all_left([](uint32_t r) { return r == 0; }));
  CHECK(book.leave(1, true, "").what == leaving::left);
  CHECK(book.all_left(everyone));
  // A rank that said bye may join again.
  auto j = book.join(0, "h:3", 7);
  CHECK_FALSE(j.refused);
  CHECK(j.was == rank_status::left);
}

TEST_CASE("a rejoin's new attach token voids the proofs taken under the old one",
          "[rank_book]") {
  rank_book book{1};
  book.join(0, "h:1", 5);
  using v = attach_ledger::verdict;
  REQUIRE(book.attach(0, nonce(1)) == v::taken);
  book.leave(0, false, "cut");
  book.join(0, "h:1", 9);
  CHECK(book.token(0) == 9);
  CHECK(book.attach(0, nonce(1)) == v::taken);
  CHECK(book.attaches(0) == 1);
  // A job that arrives by a move starts with every rank absent.
  book.reset(4);
  CHECK(book.size() == 4);
  CHECK(book.status(0) == rank_status::absent);
  CHECK(book.token(0) == 0);
  CHECK(book.attaches(0) == 0);
  CHECK(book.count(everyone).live == 0);
}

} // namespace rw_unit_rank_book
