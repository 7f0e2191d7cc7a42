#pragma once
// What the link's receiver thread tells the worker's proxy, as an interface: the link
// knows nothing of the proxy, and the proxy's implementation (worker/proxy.cpp,
// proxy_events) turns each call into a message to its actor, so the receiver never
// waits on it. Each call may come from the receiver thread while the proxy runs.

#include <cstdint>
#include <string>

#include "rackweave/errc.hpp"

namespace rw::actors {

class link_events {
public:
  virtual ~link_events() = default;
  /// Every chunk of operation `seq` on `tensor` is answered.
  virtual void done(uint32_t tensor, uint64_t seq) = 0;
  /// The node answered operation `seq` on `tensor` with an error frame.
  virtual void failed(uint32_t tensor, uint64_t seq, errc code, std::string why) = 0;
  /// The connections are gone: every pending and later operation fails (told once
  /// nothing lands in a caller's buffer any more).
  virtual void lost(errc code, std::string why) = 0;
  /// Shard `shard` of the node behind connection `conn` restarted (UINT32_MAX: the link
  /// said hello to that node again): what it serves and has not answered is sent again.
  virtual void resend(uint32_t conn, uint32_t shard) = 0;
  /// The job's nodes changed (the link routes by the new ring already): what is now
  /// homed on the node behind `conn` and has not been answered is sent there again;
  /// with `only_moved` (that node kept what the ring before routed to it: a takeover)
  /// only what the ring change moved (worker_link::moved_by_reroute).
  virtual void reroute(uint32_t conn, bool only_moved) = 0;
  /// Operation `seq` on `tensor` has the chunks answered that the proxy asked to be
  /// told of (worker_link::wake_when_answered: the push window may move on).
  virtual void answered(uint32_t tensor, uint64_t seq) = 0;
};

} // namespace rw::actors
