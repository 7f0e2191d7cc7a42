// Sending one operation's chunks, paced by the push window (worker/chunk_sender.hpp).
#include "worker/chunk_sender.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "protocol/data_frame.hpp"
#include "protocol/half.hpp"

namespace rw::actors {

namespace {
constexpr size_t batch = 64; // frames per gather write
} // namespace

chunk_sender::chunk_sender(worker_link& link, uint32_t tensor, const worker_op& op,
                           uint64_t clock, chunk_filter only, uint64_t seq,
                           uint32_t window)
  : link_(link), tensor_(tensor), op_(op), clock_(clock), only_(std::move(only)),
    seq_(seq), window_(window), window_step_(std::max<uint32_t>(window / 4, 1)) {
  if (link_.shm() != nullptr)
    return;
  // bf16 / fp16: a dense pushed chunk travels as 16-bit values, packed into the link's
  // buffer as it goes out (each run's sends are done before it returns). Inits travel
  // exact.
  half_ = op.kind == worker_op::push || op.kind == worker_op::push_pull ? link.half_flag()
                                                                        : uint16_t{0};
  if (!op.sparse)
    return;
  // Sparse: each chunk's pairs, or the dense chunk where that is smaller (in a bf16 /
  // fp16 job always the dense chunk, rounded as any push is, as over shared memory).
  auto& layout = link.layout(tensor);
  pairs_.resize(layout.count());
  dense_.resize(layout.count());
  for (size_t i = 0; i < op.count; ++i) {
    auto c = static_cast<uint32_t>(op.indices[i] / layout.chunk_elems);
    pairs_[c].push_back(
      {static_cast<uint32_t>(op.indices[i] - layout.offset(c)), op.values[i]});
  }
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (half_ == 0
        && pairs_[c].size() * sizeof(protocol::sparse_pair)
             <= layout.length(c) * sizeof(float))
      continue;
    dense_[c].assign(layout.length(c), 0.0f);
    for (auto& p : pairs_[c])
      dense_[c][p.index] += p.value;
    pairs_[c].clear();
  }
}

// Posts every chunk through shared memory: gradients land in the segment's gradient
// region (no copy if the caller computed them there), and the node is rung every few
// chunks so it starts summing before the whole tensor is posted.
chunk_sender::result chunk_sender::post_all() {
  auto& shm = *link_.shm();
  auto& layout = link_.layout(tensor_);
  auto* grad = shm.gradient(tensor_);
  const auto& op = op_;
  transports::shm::request r{};
  r.tensor = tensor_;
  r.clock = op.kind == worker_op::pull ? op.min_version : clock_;
  const auto shape = protocol::frame_for(op.kind, {op.only_changed, op.subscribe});
  r.kind = uint16_t(shape.kind);
  r.flags = shape.flags;
  if (op.sparse && only_.empty()) { // scattered straight into the gradient region
    std::memset(grad, 0, layout.elements * sizeof(float));
    for (size_t i = 0; i < op.count; ++i)
      grad[op.indices[i]] += op.values[i];
  }
  constexpr uint32_t ring_every = 64;
  // bf16 / fp16: the chunk is rounded in the segment as the wire would round it, so a
  // job computes the same whatever its workers' transports. A re-sent chunk computed
  // in the segment was rounded the first time (fp16 rounding twice may not be rounding
  // once: the second scale comes from the rounded values).
  const uint16_t half = op.kind == worker_op::init ? uint16_t{0} : link_.half_flag();
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (!only_.empty() && !only_[c])
      continue;
    if (op.src != nullptr && op.src != grad)
      std::memcpy(grad + layout.offset(c), op.src + layout.offset(c),
                  layout.length(c) * sizeof(float));
    if (half != 0 && op.kind != worker_op::pull
        && (only_.empty() || (op.src != nullptr && op.src != grad)))
      protocol::round_half(half, grad + layout.offset(c), layout.length(c));
    r.chunk = c;
    // The ring is full: the node is behind. It drains the ring within microseconds
    // unless it is gone, which the link sees.
    while (!shm.post(r)) {
      if (link_.closed())
        return failed;
      shm.ring_node();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if ((c + 1) % ring_every == 0)
      shm.ring_node();
  }
  shm.ring_node();
  return sent;
}

// A connection to a node the job left (or lost: its replicas take over) is skipped;
// what it would have carried is sent again after the reroute.
void chunk_sender::flush(size_t e) {
  auto& p = per_conn_[e];
  const bool retired = link_.retired(static_cast<uint32_t>(e));
  bool ok = p.headers.empty() || retired
            || (*conns_)[e]->send_batch(p.headers.data(), p.payloads.data(),
                                        static_cast<int>(p.headers.size()));
  if (ok && !p.headers.empty() && !retired) {
    uint64_t bytes = 0;
    for (auto& hdr : p.headers)
      bytes += protocol::frame_header_bytes + hdr.payload_bytes;
    link_.count_sent(bytes);
  }
  p.headers.clear();
  p.payloads.clear();
  failed_ = failed_ || !ok;
}

iovec chunk_sender::pack(uint32_t c, const float* values, protocol::frame_header& hdr) {
  auto& layout = link_.layout(tensor_);
  const size_t stride = protocol::half_payload_bytes(half_, layout.chunk_elems);
  auto& packed = link_.pack_buffer();
  if (packed.size() < stride * layout.count())
    packed.resize(stride * layout.count());
  auto* out = packed.data() + stride * c;
  protocol::narrow_half(half_, values, layout.length(c), out);
  hdr.flags |= half_;
  hdr.payload_bytes = static_cast<uint32_t>(
    protocol::half_payload_bytes(half_, layout.length(c)));
  return iovec{out, hdr.payload_bytes};
}

chunk_sender::result chunk_sender::run() {
  if (link_.shm() != nullptr)
    return post_all();
  const auto& op = op_;
  auto& layout = link_.layout(tensor_);
  protocol::frame_header h;
  h.job_id = link_.job_id();
  h.rank = link_.rank();
  h.tensor_id = tensor_;
  const auto shape = protocol::frame_for(op.kind, {op.only_changed, op.subscribe});
  h.kind = shape.kind;
  h.flags = shape.flags;
  h.clock = op.kind == worker_op::pull ? op.min_version : clock_;
  h.ring = link_.ring_stamp(); // routed by this ring (a node on a newer one drops it)
  // One snapshot of the routes for the run, then of the connections (a node joining
  // appends its connections before the routes that use them).
  const auto routes = link_.routes();
  conns_ = link_.conns();
  per_conn_.assign(conns_->size(), {});
  // Inits go to the chunk's replica as well (it sets version 0 too; only the home
  // answers). A push goes to the home alone: the home sends the step's sum on.
  const bool to_replica = op.kind == worker_op::init;
  auto add = [&](uint32_t e, const protocol::frame_header& hc, iovec piece) {
    per_conn_[e].headers.push_back(hc);
    per_conn_[e].payloads.push_back(piece);
    if (per_conn_[e].headers.size() == batch)
      flush(e);
  };
  for (; next_ < layout.count(); ++next_) {
    const uint32_t c = next_;
    if (!only_.empty() && !only_[c])
      continue;
    if (window_ > 0 && c >= window_ && c % window_step_ == 0) {
      for (size_t e = 0; e < per_conn_.size(); ++e) // what waits must be on its way
        flush(e);
      if (!link_.wake_when_answered(tensor_, seq_, c - window_ + 1))
        return paused; // run() again from chunk c
    }
    h.chunk_index = c;
    iovec piece{nullptr, 0};
    auto hc = h; // this chunk's header (a packed chunk's flags and size are its own)
    if (op.sparse) {
      bool as_dense = !dense_[c].empty();
      hc.kind = as_dense ? protocol::frame_kind::push : protocol::frame_kind::push_sparse;
      hc.payload_bytes = static_cast<uint32_t>(
        as_dense ? dense_[c].size() * sizeof(float)
                 : pairs_[c].size() * sizeof(protocol::sparse_pair));
      piece = {as_dense ? static_cast<void*>(dense_[c].data())
                        : static_cast<void*>(pairs_[c].data()),
               hc.payload_bytes};
      if (as_dense && half_ != 0)
        piece = pack(c, dense_[c].data(), hc);
    } else if (half_ != 0) {
      piece = pack(c, op.src + layout.offset(c), hc);
    } else if (op.kind != worker_op::pull) {
      hc.payload_bytes = layout.length(c) * sizeof(float);
      piece = {const_cast<float*>(op.src + layout.offset(c)), hc.payload_bytes};
    }
    add(routes->connection_of(tensor_, c), hc, piece);
    if (!to_replica)
      continue;
    auto r = routes->replica_connection_of(tensor_, c);
    if (r != UINT32_MAX)
      add(r, hc, piece);
  }
  for (size_t e = 0; e < per_conn_.size(); ++e)
    flush(e);
  return failed_ ? failed : sent;
}

} // namespace rw::actors
