// The attach proofs' nonces per rank (logic/attach_ledger.hpp).

#include "logic/attach_ledger.hpp"

namespace rw::actors::detail {

attach_ledger::verdict attach_ledger::take(uint32_t rank, uint64_t token,
                                           const std::vector<std::byte>& nonce) {
  if (rank >= ranks_.size())
    ranks_.resize(size_t{rank} + 1);
  auto& used = ranks_[rank];
  if (used.token != token)
    used = {token, {}};
  if (used.seen.size() >= max_per_welcome)
    return verdict::exhausted;
  return used.seen.insert(nonce).second ? verdict::taken : verdict::replayed;
}

size_t attach_ledger::taken(uint32_t rank) const {
  return rank < ranks_.size() ? ranks_[rank].seen.size() : 0;
}

} // namespace rw::actors::detail
