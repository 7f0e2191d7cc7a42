// Another node's rate probe on a NIC poller (services/rate_probe): the poller
// takes the probe's bytes into one scratch buffer, overwriting them, and answers the
// last frame with an ack carrying how many it took. Nothing here authenticates the
// prober, so what a probe can cost is bounded instead: at most
// defaults::probe_frame_bytes per frame, defaults::probe_max_bytes per connection (each
// frame's header counted too, so empty frames cannot go on for ever),
// defaults::probe_max_ms per connection and defaults::probe_max_connections probes at
// once per endpoint. A probe past a bound is
// refused with an error frame and its connection closed; a probe's connection carries
// nothing else (a worker's frames there are refused), and a worker's never a probe.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"
#include "logic/limited_log.hpp"

namespace rw::actors::detail {

namespace {

payload_target refuse_probe(const connection_ptr& c, const frame_header& h, errc code,
                            const std::string& why) {
  log_limited(spdlog::level::warn, c->peer(), "rate probe refused " + why,
              fmt::format("rate probe refused: peer={}: {} ({}); connection closed",
                          c->peer(), why, to_string(code)));
  c->send_error(code, why, h);
  return payload_target::closing();
}

} // namespace

payload_target poller_sink::on_probe_header(const connection_ptr& c,
                                            const frame_header& h) {
  auto& st = self_->state;
  if (st.book->bindings.count(c->id()) != 0)
    return refuse_probe(c, h, errc::bad_frame, "a rate probe on a worker's connection");
  auto it = st.book->probes.find(c->id());
  if (it == st.book->probes.end()) {
    if (st.book->probes.size() >= defaults::probe_max_connections)
      return refuse_probe(
        c, h, errc::unavailable,
        fmt::format("this endpoint is taking {} rate probes already; try "
                    "again shortly",
                    st.book->probes.size()));
    probe_taken fresh;
    fresh.conn = c;
    it = st.book->probes.emplace(c->id(), std::move(fresh)).first;
    spdlog::debug("rate probe started: peer={}", c->peer());
  }
  if (h.payload_bytes > defaults::probe_frame_bytes)
    return refuse_probe(c, h, errc::frame_too_large,
                        fmt::format("a probe frame of {} bytes; the limit is {}",
                                    h.payload_bytes, defaults::probe_frame_bytes));
  auto charged = uint64_t{protocol::frame_header_bytes} + h.payload_bytes;
  if (it->second.charged + charged > defaults::probe_max_bytes)
    return refuse_probe(
      c, h, errc::frame_too_large,
      fmt::format("a rate probe of more than {} bytes (headers included) "
                  "on one connection",
                  defaults::probe_max_bytes));
  it->second.charged += charged;
  it->second.bytes += h.payload_bytes;
  if (h.payload_bytes == 0)
    return payload_target::into(nullptr);
  if (!st.book->probe_scratch)
    st.book->probe_scratch = std::make_unique<std::byte[]>(defaults::probe_frame_bytes);
  return payload_target::into(st.book->probe_scratch.get());
}

void poller_sink::on_probe(const connection_ptr& c, const frame_header& h) {
  if ((h.flags & protocol::flag_want_result) == 0)
    return;
  auto taken = self_->state.book->probes[c->id()].bytes;
  frame_header reply;
  reply.kind = frame_kind::ack;
  reply.clock = taken;
  c->send(reply);
  spdlog::debug("rate probe answered: peer={} bytes={}", c->peer(), taken);
}

void end_overdue_probes(poller_ptr self) {
  auto& probes = self->state.book->probes;
  if (probes.empty())
    return;
  auto now = std::chrono::steady_clock::now();
  const auto limit = std::chrono::milliseconds(defaults::probe_max_ms);
  for (auto& [id, p] : probes) {
    if (now - p.since < limit)
      continue;
    p.since = now; // its close (on_closed) frees the slot
    spdlog::warn("rate probe closed: peer={}: still open {} ms after it began (a probe "
                 "lasts at most {} ms)",
                 p.conn->peer(), defaults::probe_max_ms, defaults::probe_max_ms);
    p.conn->close();
  }
}

} // namespace rw::actors::detail
