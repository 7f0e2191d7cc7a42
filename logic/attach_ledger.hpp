#pragma once
// The proofs a job's ranks attached further connections with (a worker makes one per
// further endpoint of the node, again after a lost connection): each nonce is taken
// once under the rank's current attach token, so a proof seen on the wire cannot be
// replayed, and at most max_per_welcome are kept per token, so a rank that attaches in
// a loop cannot grow the node's memory (it says hello again for a new token). Plain
// logic, no actor: the rack coordinator's on_attach (actors/rack/admission.cpp) checks
// the proof's MAC, then takes its nonce here. Tests: tests/unit/test_admission_rules.cpp.

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace rw::actors::detail {

class attach_ledger {
public:
  /// Attaches one welcome admits.
  static constexpr size_t max_per_welcome = 4096;

  enum class verdict {
    taken,     // a new nonce: the attach goes on
    exhausted, // max_per_welcome taken under this token already
    replayed,  // this nonce was taken under this token already
  };

  /// Takes `nonce` for `rank` under `token` (its newest welcome's attach token: a new
  /// token forgets the nonces of the one before).
  verdict take(uint32_t rank, uint64_t token, const std::vector<std::byte>& nonce);
  /// The nonces `rank` has taken under its current token.
  size_t taken(uint32_t rank) const;

private:
  struct rank_nonces {
    uint64_t token = 0;
    std::set<std::vector<std::byte>> seen;
  };
  std::vector<rank_nonces> ranks_;
};

} // namespace rw::actors::detail
