#pragma once
// Where a frame sink that reads several connections on one thread lands the payloads it
// decodes afterwards (error texts, reroutes, 16-bit chunks): one buffer per connection.
//
// A poll set reads its connections in turns, a piece at a time, so one connection's
// payload may be half in when another connection's header arrives. A buffer shared by
// every connection would then be resized (its memory freed under the first reader) or
// overwritten before the first frame is decoded. A connection reads one frame at a time,
// so its own buffer is free again once on_frame has decoded what it holds.

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "transports/transport.hpp"

namespace rw::transports {

template <class Extra = std::nullptr_t>
class receive_scratch {
public:
  struct landing {
    std::vector<std::byte> bytes;
    Extra extra{}; // what the sink keeps with the payload (where it goes next, say)
  };

  /// Connection `c`'s landing (made empty on first use). The reference stays valid
  /// until forget(c): other connections' landings do not move it.
  landing& of(const connection_ptr& c) { return by_conn_[c->id()]; }

  /// `c` closed: its buffer is released.
  void forget(const connection_ptr& c) { by_conn_.erase(c->id()); }

private:
  // unordered_map: its elements stay where they are when others are added.
  std::unordered_map<uint64_t, landing> by_conn_;
};

} // namespace rw::transports
