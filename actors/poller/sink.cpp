// The poller's frame sink: what each frame from a worker or a peer node does (the
// header checked and its payload's buffer chosen, the frame handed to its shard, a
// pull, a sparse or 16-bit push decoded), and what a closed connection ends.

#include "actors/poller/sink.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"
#include "protocol/data_check.hpp"
#include "protocol/half.hpp"
#include "protocol/sparse.hpp"
#include "runtime/thread_cpu.hpp"
#include "runtime/trace.hpp"
#include "transports/fabric/connection.hpp"
#include "transports/shm/connection.hpp"

namespace rw::actors::detail {

payload_target poller_sink::on_header(const connection_ptr& c, const frame_header& h) {
  auto& st = self_->state;
  ++st.book->frames_in;
  st.book->bytes_in += protocol::frame_header_bytes + h.payload_bytes;
  if (h.kind == frame_kind::probe)
    return on_probe_header(c, h);
  if (st.book->probes.count(c->id()) != 0)
    return refuse(c, h, errc::bad_frame,
                  fmt::format("a {} frame on a rate probe's connection",
                              protocol::to_string(h.kind)));
  switch (h.kind) {
    case frame_kind::hello:
      if (st.book->bindings.count(c->id()) != 0)
        return refuse(c, h, errc::bad_frame, "a second hello on one connection");
      if (h.payload_bytes == 0)
        return refuse(c, h, errc::bad_frame, "hello without a payload");
      // Gathered as it arrives (a peer that has proven nothing holds what it sent, not
      // what its header announced), each connection's apart.
      return payload_target::gathered();
    case frame_kind::proof: {
      auto it = st.book->bindings.find(c->id());
      if (it == st.book->bindings.end() || it->second.status != binding::challenged)
        return refuse(c, h, errc::bad_frame, "a proof without a challenge to answer");
      if (h.payload_bytes == 0)
        return refuse(c, h, errc::bad_frame, "proof without a payload");
      return payload_target::gathered();
    }
    case frame_kind::locate:
      if (h.payload_bytes != 0)
        return refuse(c, h, errc::bad_frame, "locate carries no payload");
      return payload_target::into(nullptr);
    case frame_kind::fabric: {
      auto it = st.book->bindings.find(c->id());
      if (it == st.book->bindings.end() || it->second.status != binding::joined)
        return refuse(c, h, errc::not_joined, "a fabric offer before the welcome");
      if (h.payload_bytes == 0 || h.payload_bytes > 4096)
        return refuse(
          c, h, errc::bad_frame,
          fmt::format("a fabric frame carries a FabricOffer of 1..4096 bytes, "
                      "not {}",
                      h.payload_bytes));
      return payload_target::into(st.buffer(4096));
    }
    case frame_kind::attach:
      if (st.book->bindings.count(c->id()) != 0)
        return refuse(c, h, errc::bad_frame,
                      "attach on a connection that already joined");
      if (h.payload_bytes == 0 || h.payload_bytes > 4096)
        return refuse(
          c, h, errc::unauthorized,
          fmt::format("an attach carries an AttachProof of 1..4096 bytes, not {} "
                      "(wire protocol {})",
                      h.payload_bytes, defaults::wire_version));
      return payload_target::gathered();
    case frame_kind::push:
    case frame_kind::push_sparse:
    case frame_kind::init:
    case frame_kind::pull:
    case frame_kind::bye:
    case frame_kind::state:
    case frame_kind::hyper: return check_data(c, h);
    default:
      return refuse(
        c, h, errc::bad_frame,
        fmt::format("a worker may not send {} frames", protocol::to_string(h.kind)));
  }
}

void poller_sink::on_frame(const connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  auto& st = self_->state;
  if (t.action == payload_target::discard)
    return;
  switch (h.kind) {
    case frame_kind::hello: on_hello(c, h, t); return;
    case frame_kind::attach: on_attach(c, h, t); return;
    case frame_kind::proof: on_proof(c, h, t); return;
    case frame_kind::locate: on_locate(c, h); return;
    case frame_kind::probe: on_probe(c, h); return;
    case frame_kind::bye: st.book->bindings[c->id()].said_bye = true; return;
    case frame_kind::pull: on_frame_pull(c, h); return;
    case frame_kind::push_sparse: on_sparse(c, h, t); return;
    case frame_kind::hyper: on_hyper(c, h, t); return;
    case frame_kind::fabric: on_fabric(c, h, t); return;
    case frame_kind::state: on_state(c, h, std::move(t.keep)); return;
    case frame_kind::push:
      if ((h.flags & protocol::flag_half) != 0) {
        on_half(c, h, t.keep->bytes());
        return;
      }
      t.keep->size = h.payload_bytes;
      dispatch_data(c, h, std::move(t.keep));
      return;
    default: // init
      t.keep->size = h.payload_bytes;
      dispatch_data(c, h, std::move(t.keep));
      return;
  }
}

// A chunk that came in another form becomes a float32 one, so shards sum it like any
// push: `decode(floats, length)` fills it, or says why it cannot, and then nothing of
// the chunk is applied.
template <class Decode>
void poller_sink::as_dense(const connection_ptr& c, const frame_header& h,
                           Decode decode) {
  auto& st = self_->state;
  auto& b = st.book->bindings[c->id()];
  auto length = b.routes->layout(h.tensor_id).length(h.chunk_index);
  auto dense = st.buffer(b.chunk_bytes);
  auto why = decode(dense->floats(), length);
  if (!why.empty()) {
    refuse(c, h, errc::bad_chunk,
           fmt::format("chunk {}/{}: {}; nothing of the chunk was applied", h.tensor_id,
                       h.chunk_index, why));
    return;
  }
  dense->size = length * sizeof(float);
  auto as_push = h;
  as_push.kind = frame_kind::push;
  as_push.flags = static_cast<uint16_t>(h.flags & ~protocol::flag_half);
  as_push.payload_bytes = static_cast<uint32_t>(dense->size);
  dispatch_data(c, as_push, std::move(dense));
}

// A sparse chunk: zeros, plus each pair added at its index, so sparse and dense pushes
// combine exactly. Any index out of range refuses the whole chunk.
void poller_sink::on_sparse(const connection_ptr& c, const frame_header& h,
                            payload_target& t) {
  // An empty chunk (no payload): this worker adds nothing to it.
  const std::byte* pairs = t.keep ? t.keep->bytes() : nullptr;
  as_dense(c, h, [&](float* dense, size_t length) {
    return protocol::densify_sparse(pairs, h.payload_bytes, dense, length);
  });
}

// A 16-bit chunk (its size checked by check_data), widened exactly. A bad fp16 scale
// refuses the whole chunk.
void poller_sink::on_half(const connection_ptr& c, const frame_header& h,
                          const std::byte* payload) {
  auto flag = static_cast<uint16_t>(h.flags & protocol::flag_half);
  as_dense(c, h, [&](float* dense, size_t length) {
    return protocol::widen_half(flag, payload, h.payload_bytes, dense, length);
  });
}

// Shared memory: the gradient is read in place, after the same checks as TCP frames.
void poller_sink::on_resident_frame(const connection_ptr& c, const frame_header& h,
                                    runtime::buffer_ref payload) {
  if (!admissible(c, h))
    return;
  if (h.kind == frame_kind::pull)
    on_frame_pull(c, h);
  else if (h.kind == frame_kind::push && (h.flags & protocol::flag_half) != 0)
    on_half(c, h, payload->bytes()); // a fabric slot's 16-bit chunk
  else
    dispatch_data(c, h, std::move(payload));
}

void poller_sink::on_closed(const connection_ptr& c, errc code, const std::string& why) {
  auto& st = self_->state;
  st.book->strikes.erase(c->id());
  st.book->locates.erase(c->id());
  if (auto p = st.book->probes.find(c->id()); p != st.book->probes.end()) {
    spdlog::debug("rate probe ended: peer={} bytes={}", c->peer(), p->second.bytes);
    st.book->probes.erase(p);
    return;
  }
  auto it = st.book->bindings.find(c->id());
  if (it != st.book->bindings.end() && it->second.shm_companion) {
    st.book->bindings.erase(it); // its TCP connection reports the leave
    return;
  }
  if (it != st.book->bindings.end() && it->second.tcp) { // a fabric connection
    if (auto* f = dynamic_cast<const transports::fabric::connection*>(c.get()))
      spdlog::info(
        "fabric connection done: peer={} job={} rank={}: {} frames sent, {} of "
        "them updates written straight into the worker's output buffers, {} "
        "waited in the send queue for a slot; {} slots given back in {} credit "
        "messages",
        c->peer(), it->second.job_id, it->second.rank, f->frames_sent(), f->placed_sent(),
        f->queued_frames(), f->credits_given(), f->credit_messages());
    if (code != errc::ok || it->second.tcp->is_open())
      spdlog::warn(
        "fabric connection closed: peer={} job={} rank={}: {} ({}); closing its "
        "TCP link too",
        c->peer(), it->second.job_id, it->second.rank, why, to_string(code));
    it->second.tcp->close(); // its poller reports the leave
    st.book->bindings.erase(it);
    return;
  }
  if (it != st.book->bindings.end() && it->second.shm)
    it->second.shm->close(); // the shm poller drops the segment
  if (it != st.book->bindings.end() && it->second.fabric)
    it->second.fabric->close(); // the fabric poller drops it
  if (it == st.book->bindings.end()) {
    if (code == errc::ok)
      spdlog::debug("connection closed: peer={} before joining a job", c->peer());
    else
      log_limited(spdlog::level::warn, c->peer(),
                  fmt::format("closed {} {}", to_string(code), why),
                  fmt::format("connection closed: peer={} before joining a job: {} ({})",
                              c->peer(), why, to_string(code)));
    return;
  }
  auto b = it->second;
  st.book->bindings.erase(it);
  if (b.status != binding::joined)
    return; // the hello reply will see the connection gone and tell the coordinator
  if (b.rank == protocol::mirror_rank) { // another node's mirror link: no rank left
    spdlog::info("mirror link closed: peer={} job={}: {}", c->peer(), b.job_id, why);
    return;
  }
  if (!b.said_bye)
    spdlog::warn("connection closed: peer={} job={} rank={}: {} ({})", c->peer(),
                 b.job_name.empty() ? std::to_string(b.job_id)
                                    : fmt::format("'{}' id={}", b.job_name, b.job_id),
                 b.rank, why, to_string(code));
  flush();
  self_->send(st.book->coordinator, leave_atom::value, b.job_id, b.rank, b.said_bye,
              fmt::format("{}: {}", c->peer(), why));
}

payload_target poller_sink::refuse(const connection_ptr& c, const frame_header& h,
                                   errc code, const std::string& why) {
  auto& book = *self_->state.book;
  ++book.refused;
  auto b = book.bindings.find(c->id());
  const bool joined = b != book.bindings.end() && b->second.status == binding::joined;
  const auto strikes = joined ? 0 : ++book.strikes[c->id()];
  const bool closing = strikes >= defaults::max_stranger_refusals;
  log_limited(
    spdlog::level::warn, c->peer(), fmt::format("refused {} {}", to_string(code), why),
    fmt::format("frame refused: peer={} kind={} job={} rank={} tensor={} chunk={} "
                "clock={}: {} ({}){}",
                c->peer(), protocol::to_string(h.kind), h.job_id, h.rank, h.tensor_id,
                h.chunk_index, h.clock, why, to_string(code),
                closing ? fmt::format("; connection closed: {} frames refused "
                                      "before it joined a job",
                                      strikes)
                        : std::string{}));
  c->send_error(code, why, h);
  if (!closing)
    return payload_target::dropped();
  c->close();
  return payload_target::closing();
}

binding* poller_sink::home_of(const connection_ptr& c, const frame_header& h,
                              uint32_t& shard) {
  auto& st = self_->state;
  auto it = st.book->bindings.find(c->id());
  if (it == st.book->bindings.end() || !it->second.routes)
    return nullptr; // closed or left while the payload arrived
  auto& routes = *it->second.routes;
  if (h.tensor_id < routes.num_tensors()
      && h.chunk_index < routes.layout(h.tensor_id).count()) {
    shard = routes.shard_of(h.tensor_id, h.chunk_index);
    if (shard != runtime::routing_table::not_here && shard < st.book->shards.size())
      return &it->second;
  }
  spdlog::debug("frame dropped: peer={} kind={} job={} chunk {}/{} clock={}: its chunk "
                "moved to another node while the frame arrived (the worker sends it "
                "again there)",
                c->peer(), protocol::to_string(h.kind), h.job_id, h.tensor_id,
                h.chunk_index, h.clock);
  return nullptr;
}

void poller_sink::on_frame_pull(const connection_ptr& c, const frame_header& h) {
  auto& st = self_->state;
  uint32_t shard = 0;
  auto* bound = home_of(c, h, shard);
  if (bound == nullptr)
    return;
  auto& b = *bound;
  flush();
  self_->send(st.book->shards[shard], pull_atom::value,
              chunk_pull{h.job_id, b.shard_rank, h.tensor_id, h.chunk_index, h.clock, c,
                         (h.flags & protocol::flag_only_changed) != 0,
                         (h.flags & protocol::flag_subscribe) != 0});
}

void poller_sink::on_state(const connection_ptr& c, const frame_header& h,
                           runtime::buffer_ref payload) {
  auto& st = self_->state;
  uint32_t shard = 0;
  auto* bound = home_of(c, h, shard);
  if (bound == nullptr)
    return;
  auto& b = *bound;
  if (payload)
    payload->size = h.payload_bytes;
  flush(); // after the pushes read before it
  self_->send(st.book->shards[shard], state_atom::value,
              state_request{h.job_id, b.shard_rank, h.tensor_id, h.chunk_index, h.clock,
                            h.staleness, (h.flags & protocol::flag_state_load) != 0,
                            std::move(payload), c, h.ring});
}

uint64_t poller_sink::priority(const connection_ptr& c) const {
  auto& st = self_->state;
  if (!st.settings.priority)
    return 0;
  auto it = st.book->bindings.find(c->id());
  return it == st.book->bindings.end() ? 0 : it->second.clock;
}

void poller_sink::dispatch_data(const connection_ptr& c, const frame_header& h,
                                runtime::buffer_ref payload) {
  auto& st = self_->state;
  uint32_t index = 0;
  auto* bound = home_of(c, h, index);
  if (bound == nullptr)
    return;
  auto& b = *bound;
  if (h.kind == frame_kind::push)
    b.clock = std::max(b.clock, h.clock);
  if (h.kind == frame_kind::push && payload)
    hold_against(*st.book, c, b, *payload);
  runtime::trace::instant(h.kind == frame_kind::push ? "push received" : "init received",
                          "poller",
                          {h.job_id, b.shard_rank, h.tensor_id, h.chunk_index, h.clock});
  chunk_push p{h.job_id,
               b.shard_rank,
               h.tensor_id,
               h.chunk_index,
               h.clock,
               (h.flags & protocol::flag_want_result) != 0,
               std::move(payload),
               c,
               h.ring};
  if (h.kind == frame_kind::push) {
    if (st.outbox.size() <= index)
      st.outbox.resize(st.book->shards.size());
    st.outbox[index].push_back(std::move(p));
    return;
  }
  flush();
  self_->send(st.book->shards[index], init_atom::value, std::move(p));
}

void poller_sink::flush() {
  auto& st = self_->state;
  for (size_t i = 0; i < st.outbox.size(); ++i) {
    auto& pushes = st.outbox[i];
    if (pushes.empty())
      continue;
    if (pushes.size() == 1)
      self_->send(st.book->shards[i], push_atom::value, std::move(pushes.front()));
    else
      self_->send(st.book->shards[i], push_atom::value, std::move(pushes));
    pushes = {};
  }
}

// Checks a data frame against the connection's binding; refuses it (error frame)
// and returns false if it does not fit.
bool poller_sink::admissible(const connection_ptr& c, const frame_header& h) {
  if (h.kind != frame_kind::push && h.kind != frame_kind::init
      && h.kind != frame_kind::pull) {
    refuse(c, h, errc::bad_frame, "only push, init and pull travel on shared memory");
    return false;
  }
  return check_data(c, h, false).action == payload_target::receive;
}

payload_target poller_sink::check_data(const connection_ptr& c, const frame_header& h,
                                       bool allocate) {
  auto& st = self_->state;
  auto it = st.book->bindings.find(c->id());
  if (it == st.book->bindings.end() || it->second.status != binding::joined)
    return refuse(c, h, errc::not_joined,
                  fmt::format("{} before the connection joined a job: send hello and "
                              "wait for welcome",
                              protocol::to_string(h.kind)));
  auto& b = it->second;
  protocol::data_context ctx;
  ctx.job_id = b.job_id;
  ctx.rank = b.rank;
  ctx.routes = b.routes.get();
  ctx.previous = b.previous.get();
  // A mirror link sends float32 sums; shared memory carries float32 (the worker rounds
  // its chunks in place as the wire would).
  ctx.job_half = b.rank == protocol::mirror_rank || c->resident()
                   ? uint16_t{0}
                   : protocol::half_flag(b.compression);
  ctx.compression = &b.compression;
  ctx.node_name = st.settings.node_name;
  auto check = protocol::check_data_frame(h, ctx);
  switch (check.verdict) {
    case protocol::data_check::refuse: return refuse(c, h, check.code, check.why);
    case protocol::data_check::drop: return payload_target::dropped();
    case protocol::data_check::receive: break;
  }
  if (!allocate || check.payload == protocol::data_check::none)
    return payload_target::into(nullptr);
  return payload_target::into(st.buffer(check.payload == protocol::data_check::hyper
                                          ? protocol::max_hyper_bytes
                                          : b.chunk_bytes));
}

} // namespace rw::actors::detail
