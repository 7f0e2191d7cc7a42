// A job's ranks on a node (logic/rank_book.hpp).

#include "logic/rank_book.hpp"

namespace rw::actors::detail {

const char* to_string(rank_status s) {
  switch (s) {
    case rank_status::absent: return "absent";
    case rank_status::live: return "live";
    case rank_status::away: return "away";
    case rank_status::left: return "left";
  }
  return "?";
}

rank_book::rank_book(uint32_t ranks) : ranks_(ranks) {}

void rank_book::reset(uint32_t ranks) {
  ranks_.assign(ranks, rank_entry{});
  attached_ = attach_ledger{};
}

rank_book::joining rank_book::join(uint32_t rank, const std::string& peer, uint64_t token,
                                   clock::time_point now) {
  auto& e = ranks_.at(rank);
  joining out;
  out.was = e.status;
  if (e.status == rank_status::live) {
    out.refused = true;
    return out;
  }
  if (e.status == rank_status::away) {
    out.away_for = std::chrono::duration_cast<std::chrono::milliseconds>(now
                                                                         - e.away_since);
    out.away_reason = e.reason;
  }
  e.status = rank_status::live;
  e.connections = 1;
  e.token = token;
  e.peer = peer;
  return out;
}

attach_ledger::verdict rank_book::attach(uint32_t rank,
                                         const std::vector<std::byte>& nonce) {
  auto& e = ranks_.at(rank);
  auto v = attached_.take(rank, e.token, nonce);
  if (v == attach_ledger::verdict::taken)
    ++e.connections;
  return v;
}

rank_book::leave_outcome rank_book::leave(uint32_t rank, bool graceful,
                                          const std::string& reason,
                                          clock::time_point now) {
  if (rank >= ranks_.size() || ranks_[rank].status != rank_status::live)
    return {};
  auto& e = ranks_[rank];
  if (e.connections > 0)
    --e.connections;
  if (graceful && e.connections > 0)
    return {leaving::still_connected, 0};
  if (!graceful) {
    e.status = rank_status::away;
    e.connections = 0;
    e.away_since = now;
    e.reason = reason;
    return {leaving::away, ++e.departures};
  }
  e.status = rank_status::left;
  return {leaving::left, 0};
}

bool rank_book::still_away(uint32_t rank, uint32_t departure) const {
  return rank < ranks_.size() && ranks_[rank].status == rank_status::away
         && ranks_[rank].departures == departure;
}

} // namespace rw::actors::detail
