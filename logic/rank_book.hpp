#pragma once
// A job's ranks on a node, as a plain class: which joined, which are connected and by
// how many connections, which went away without a bye (each departure numbered, since
// when and why: its rejoin window) and which said bye; where each connected from, each
// live rank's attach token and the attach proofs taken under it (attach_ledger). The
// rack coordinator drives it (actors/rack/create.cpp, ranks.cpp, admission.cpp) and does
// what it answers: logs, tells the shards, schedules the rejoin window, ends the job.
// Tests: tests/unit/test_rank_book.cpp.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "logic/attach_ledger.hpp"

namespace rw::actors::detail {

/// A rank of a job: never joined; joined and connected; gone without bye (it may join
/// again until its rejoin window closes); said bye (it may join again too).
enum class rank_status : uint8_t { absent, live, away, left };

const char* to_string(rank_status s);

class rank_book {
public:
  using clock = std::chrono::steady_clock;

  /// `ranks` ranks, none joined.
  explicit rank_book(uint32_t ranks = 0);
  /// Every rank absent again, `ranks` of them (a job that arrives by a move).
  void reset(uint32_t ranks);

  uint32_t size() const { return static_cast<uint32_t>(ranks_.size()); }
  rank_status status(uint32_t rank) const { return ranks_.at(rank).status; }
  /// Where the rank last connected from ("" if never).
  const std::string& peer(uint32_t rank) const { return ranks_.at(rank).peer; }
  /// The attach token of the rank's newest welcome (0 before it joined).
  uint64_t token(uint32_t rank) const { return ranks_.at(rank).token; }
  /// Why it went away, for its latest departure.
  const std::string& away_reason(uint32_t rank) const { return ranks_.at(rank).reason; }

  struct joining {
    bool refused = false;                  // the rank is connected already (rank_taken)
    rank_status was = rank_status::absent; // before this join
    std::chrono::milliseconds away_for{0}; // was away: since it went
    std::string away_reason;               // was away: why it went
  };
  /// `rank` joins from `peer`, its connection counted, with `token` as its new attach
  /// token (the caller draws it: libsodium). Refused while the rank is live.
  joining join(uint32_t rank, const std::string& peer, uint64_t token,
               clock::time_point now = clock::now());

  /// A further connection of live `rank` (an attach) with the proof's `nonce`: taken,
  /// counted; or refused by the ledger (replayed, or too many since its welcome).
  attach_ledger::verdict attach(uint32_t rank, const std::vector<std::byte>& nonce);
  /// Attaches taken since the rank's welcome.
  size_t attaches(uint32_t rank) const { return attached_.taken(rank); }

  enum class leaving {
    ignored,         // not a live rank (the job moved on, or it went already)
    still_connected, // a bye on one of several connections: the others stay
    away,            // gone without bye: its rejoin window (departure) opens
    left,            // said bye
  };
  struct leave_outcome {
    leaving what = leaving::ignored;
    uint32_t departure = 0; // away: which departure its window belongs to
  };
  /// One of `rank`'s connections closed: with a bye (`graceful`) or not (`reason`).
  leave_outcome leave(uint32_t rank, bool graceful, const std::string& reason,
                      clock::time_point now = clock::now());
  /// Whether `rank` is still away from its `departure` (not back, not gone again with
  /// a later window): its window closing fails the job.
  bool still_away(uint32_t rank, uint32_t departure) const;

  /// Of the ranks `belongs` keeps (a rack's part of a hierarchical job: its rack's):
  /// whether every one said bye; how many there are, live, away.
  template <class Belongs>
  bool all_left(Belongs belongs) const {
    for (uint32_t r = 0; r < size(); ++r)
      if (belongs(r) && ranks_[r].status != rank_status::left)
        return false;
    return true;
  }
  struct counts {
    uint32_t ranks = 0, live = 0, away = 0;
  };
  template <class Belongs>
  counts count(Belongs belongs) const {
    counts c;
    for (uint32_t r = 0; r < size(); ++r) {
      if (!belongs(r))
        continue;
      ++c.ranks;
      c.live += ranks_[r].status == rank_status::live;
      c.away += ranks_[r].status == rank_status::away;
    }
    return c;
  }

private:
  struct rank_entry {
    rank_status status = rank_status::absent;
    uint32_t connections = 0;
    uint64_t token = 0;
    std::string peer;
    uint32_t departures = 0; // how often it went away: the epoch of its window
    clock::time_point away_since{};
    std::string reason;
  };
  std::vector<rank_entry> ranks_;
  attach_ledger attached_;
};

} // namespace rw::actors::detail
