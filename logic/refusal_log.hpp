#pragma once
// Repeated refusals of one peer, logged once per window: the first at once, the next
// only once the window has passed, with how many were not logged since. A peer that
// retries every second (a node with the wrong secret) gives one line a minute, not sixty.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace rw::actors::detail {

class refusal_log {
public:
  using clock = std::chrono::steady_clock;

  explicit refusal_log(std::chrono::seconds window = std::chrono::seconds(60))
    : window_(window) {}

  /// Whether to log this refusal of `key` (a peer and what it asked) now: nullopt if
  /// not; else how many refusals of `key` since the last logged one were not logged.
  std::optional<uint64_t> admit(const std::string& key,
                                clock::time_point now = clock::now()) {
    if (seen_.size() > max_keys)
      forget_older_than(now - window_);
    auto [it, fresh] = seen_.try_emplace(key, entry{now, 0});
    if (fresh)
      return 0;
    auto& e = it->second;
    if (now - e.logged < window_) {
      ++e.unlogged;
      return std::nullopt;
    }
    auto unlogged = e.unlogged;
    e = entry{now, 0};
    return unlogged;
  }

  size_t keys() const noexcept { return seen_.size(); }

  static constexpr size_t max_keys = 4096;

private:
  struct entry {
    clock::time_point logged;
    uint64_t unlogged;
  };

  void forget_older_than(clock::time_point t) {
    for (auto it = seen_.begin(); it != seen_.end();)
      it = it->second.logged < t ? seen_.erase(it) : std::next(it);
    if (seen_.size() > max_keys) // all recent: a flood of distinct peers
      seen_.clear();
  }

  std::chrono::seconds window_;
  std::unordered_map<std::string, entry> seen_;
};

} // namespace rw::actors::detail
