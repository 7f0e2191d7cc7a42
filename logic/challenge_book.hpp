#pragma once
// The nonces the cluster coordinator hands out (auth_atom) and has not had answered yet,
// by the asking process. Bounded: an unanswered nonce expires after `ttl`, and when the
// book is full of live ones a new asker is refused (it asks again) rather than anyone's
// pending nonce dropped: a flood of processes asking cannot make a node's or a shell's
// proof in flight fail (it once cleared every pending nonce at 1024).

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace rw::actors::detail {

template <class Key>
class challenge_book {
public:
  using clock = std::chrono::steady_clock;

  challenge_book(size_t capacity, std::chrono::milliseconds ttl)
    : capacity_(capacity), ttl_(ttl) {}

  /// Keeps `nonce` for `who` (replacing its earlier one). False if the book is full of
  /// live nonces of others: `who` is refused for now.
  bool hand_out(const Key& who, std::string nonce, clock::time_point now = clock::now()) {
    if (auto it = book_.find(who); it != book_.end()) {
      it->second = {std::move(nonce), now};
      return true;
    }
    if (book_.size() >= capacity_)
      forget_expired(now);
    if (book_.size() >= capacity_)
      return false;
    book_.emplace(who, entry{std::move(nonce), now});
    return true;
  }

  /// The nonce handed to `who`, taken out of the book; nullopt if none is (or it
  /// expired).
  std::optional<std::string> take(const Key& who, clock::time_point now = clock::now()) {
    auto it = book_.find(who);
    if (it == book_.end())
      return std::nullopt;
    auto e = std::move(it->second);
    book_.erase(it);
    if (now - e.at > ttl_)
      return std::nullopt;
    return std::move(e.nonce);
  }

  size_t size() const noexcept { return book_.size(); }
  size_t capacity() const noexcept { return capacity_; }
  std::chrono::milliseconds ttl() const noexcept { return ttl_; }

private:
  struct entry {
    std::string nonce;
    clock::time_point at;
  };

  void forget_expired(clock::time_point now) {
    for (auto it = book_.begin(); it != book_.end();)
      it = now - it->second.at > ttl_ ? book_.erase(it) : std::next(it);
  }

  size_t capacity_;
  std::chrono::milliseconds ttl_;
  std::map<Key, entry> book_;
};

} // namespace rw::actors::detail
