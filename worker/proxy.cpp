#include "worker/proxy.hpp"

#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "worker/compression.hpp"
#include "worker/link.hpp"
#include "runtime/trace.hpp"
#include "protocol/half.hpp"

namespace rw::actors {

namespace {

using protocol::frame_header;
using protocol::frame_kind;

struct tensor_queue {
  std::deque<worker_op> waiting;
  bool busy = false;
  uint64_t seq = 0; // the running operation
  worker_op running{};
  uint64_t running_clock = 0; // the clock the running operation's frames carry
  uint64_t started_ns = 0;    // when it started (trace::now_ns), if tracing
  uint64_t clock = 0;         // pushes made
};

void fail(worker_op& op, errc code, const std::string& why);

struct proxy_state {
  // Nothing may stay pending when the proxy goes away. (Not an attached functor: CAF
  // destroys the state before it runs those.)
  ~proxy_state() {
    for (auto& q : tensors) {
      if (q.busy)
        fail(q.running, errc::closed, "the worker was closed");
      for (auto& op : q.waiting)
        fail(op, errc::closed, "the worker was closed");
    }
  }

  std::shared_ptr<worker_link> link;
  std::chrono::milliseconds timeout{};
  uint64_t push_window_bytes = 0;
  bool layerwise = false;
  std::vector<tensor_queue> tensors;
  // topk: per tensor, what earlier pushes did not send (error feedback).
  std::vector<std::vector<float>> residuals;
  uint64_t next_seq = 1;
  bool lost = false;
  errc lost_code = errc::ok;
  std::string lost_reason;
  static inline const char* name = "rw.worker_proxy";
};

using proxy_ptr = worker_proxy_actor::stateful_pointer<proxy_state>;

void fail(worker_op& op, errc code, const std::string& why) {
  op.done->set_exception(std::make_exception_ptr(rw::error(code, why)));
}

const char* op_name(worker_op::kind_t k) {
  switch (k) {
    case worker_op::init: return "init";
    case worker_op::push: return "push";
    case worker_op::pull: return "pull";
    case worker_op::push_pull: return "push_pull";
  }
  return "?";
}

// Posts every chunk of `op` on tensor `t` through shared memory: gradients land in the
// segment's gradient region (no copy if the caller computed them there), and the node
// is rung every few chunks so it starts summing before the whole tensor is posted.
using chunk_filter = std::vector<bool>; // empty: every chunk

bool post_chunks(worker_link& link, uint32_t t, const worker_op& op, uint64_t clock,
                 const chunk_filter& only) {
  auto& shm = *link.shm();
  auto& layout = link.layout(t);
  auto* grad = shm.gradient(t);
  transports::shm::request r{};
  r.tensor = t;
  r.clock = op.kind == worker_op::pull ? op.min_version : clock;
  const auto shape = protocol::frame_for(op.kind, {op.only_changed, op.subscribe});
  r.kind = uint16_t(shape.kind);
  r.flags = shape.flags;
  if (op.sparse && only.empty()) { // scattered straight into the gradient region
    std::memset(grad, 0, layout.elements * sizeof(float));
    for (size_t i = 0; i < op.count; ++i)
      grad[op.indices[i]] += op.values[i];
  }
  constexpr uint32_t ring_every = 64;
  // bf16 / fp16: the chunk is rounded in the segment as the wire would round it, so a
  // job computes the same whatever its workers' transports. A re-sent chunk computed
  // in the segment was rounded the first time (fp16 rounding twice may not be rounding
  // once: the second scale comes from the rounded values).
  const uint16_t half = op.kind == worker_op::init ? uint16_t{0} : link.half_flag();
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (!only.empty() && !only[c])
      continue;
    if (op.src != nullptr && op.src != grad)
      std::memcpy(grad + layout.offset(c), op.src + layout.offset(c),
                  layout.length(c) * sizeof(float));
    if (half != 0 && op.kind != worker_op::pull
        && (only.empty() || (op.src != nullptr && op.src != grad)))
      protocol::round_half(half, grad + layout.offset(c), layout.length(c));
    r.chunk = c;
    while (!shm.post(r)) { // the ring is full: the node is behind
      if (link.closed())
        return false;
      shm.ring_node();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if ((c + 1) % ring_every == 0)
      shm.ring_node();
  }
  shm.ring_node();
  return true;
}

// Sends every chunk of `op` on tensor `t` straight from the caller's memory, in gather
// writes of up to `batch` frames per connection; returns false if a connection failed.
// With `window` (chunks; 0: none), chunk c goes out only once c - window chunks of
// operation `seq` are answered: a worker that got ahead of the others (whose pushes
// of the same chunks its answers wait for) leaves the links to them. A wait lasts at
// most max_window_wait; then the operation's other chunks go out unpaced.
constexpr std::chrono::milliseconds max_window_wait{200};

bool send_chunks(worker_link& link, uint32_t t, const worker_op& op, uint64_t clock,
                 const chunk_filter& only = {}, uint64_t seq = 0, uint32_t window = 0) {
  if (link.shm() != nullptr)
    return post_chunks(link, t, op, clock, only);
  constexpr size_t batch = 64;
  auto& layout = link.layout(t);
  frame_header h;
  h.job_id = link.job_id();
  h.rank = link.rank();
  h.tensor_id = t;
  const auto shape = protocol::frame_for(op.kind, {op.only_changed, op.subscribe});
  h.kind = shape.kind;
  h.flags = shape.flags;
  h.clock = op.kind == worker_op::pull ? op.min_version : clock;
  h.ring = link.ring_stamp(); // routed by this ring (a node on a newer one drops it)
  // bf16 / fp16: a dense pushed chunk travels as 16-bit values, packed into the link's
  // buffer as it goes out (the sends below are done before this returns). Inits travel
  // exact.
  const uint16_t half = op.kind == worker_op::push || op.kind == worker_op::push_pull
                          ? link.half_flag()
                          : uint16_t{0};
  // Sparse: each chunk's pairs, or the dense chunk where that is smaller (in a bf16 /
  // fp16 job always the dense chunk, rounded as any push is, as over shared memory).
  // Both live until the sends below are done.
  std::vector<std::vector<protocol::sparse_pair>> pairs;
  std::vector<std::vector<float>> dense;
  if (op.sparse) {
    pairs.resize(layout.count());
    dense.resize(layout.count());
    for (size_t i = 0; i < op.count; ++i) {
      auto c = static_cast<uint32_t>(op.indices[i] / layout.chunk_elems);
      pairs[c].push_back(
        {static_cast<uint32_t>(op.indices[i] - layout.offset(c)), op.values[i]});
    }
    for (uint32_t c = 0; c < layout.count(); ++c) {
      if (half == 0
          && pairs[c].size() * sizeof(protocol::sparse_pair)
               <= layout.length(c) * sizeof(float))
        continue;
      dense[c].assign(layout.length(c), 0.0f);
      for (auto& p : pairs[c])
        dense[c][p.index] += p.value;
      pairs[c].clear();
    }
  }
  struct pending {
    std::vector<frame_header> headers;
    std::vector<iovec> payloads;
  };
  // One snapshot of the routes for the whole operation, then of the connections (a
  // node joining appends its connections before the routes that use them).
  const auto routes = link.routes();
  const auto conns = link.conns();
  std::vector<pending> per_conn(conns->size());
  bool failed = false;
  // A connection to a node the job left (or lost: its replicas take over) is skipped;
  // what it would have carried is sent again after the reroute.
  auto flush = [&](size_t e) {
    auto& p = per_conn[e];
    bool ok = p.headers.empty() || link.retired(static_cast<uint32_t>(e))
              || (*conns)[e]->send_batch(p.headers.data(), p.payloads.data(),
                                         static_cast<int>(p.headers.size()));
    if (ok && !p.headers.empty() && !link.retired(static_cast<uint32_t>(e))) {
      uint64_t bytes = 0;
      for (auto& hdr : p.headers)
        bytes += protocol::frame_header_bytes + hdr.payload_bytes;
      link.count_sent(bytes);
    }
    p.headers.clear();
    p.payloads.clear();
    failed = failed || !ok;
    return true;
  };
  // Inits go to the chunk's replica as well (it sets version 0 too; only the home
  // answers). A push goes to the home alone: the home sends the step's sum on.
  const bool to_replica = op.kind == worker_op::init;
  const size_t half_stride = half != 0
                               ? protocol::half_payload_bytes(half, layout.chunk_elems)
                               : 0;
  auto& packed = link.pack_buffer();
  if (half != 0 && packed.size() < half_stride * layout.count())
    packed.resize(half_stride * layout.count());
  auto pack = [&](uint32_t c, const float* values, frame_header& hdr) {
    auto* out = packed.data() + half_stride * c;
    protocol::narrow_half(half, values, layout.length(c), out);
    hdr.flags |= half;
    hdr.payload_bytes = static_cast<uint32_t>(
      protocol::half_payload_bytes(half, layout.length(c)));
    return iovec{out, hdr.payload_bytes};
  };
  const uint32_t window_step = std::max<uint32_t>(window / 4, 1);
  const uint64_t since = link.interruptions();
  for (uint32_t c = 0; c < layout.count(); ++c) {
    if (!only.empty() && !only[c])
      continue;
    if (window > 0 && c >= window && c % window_step == 0) {
      for (size_t e = 0; e < per_conn.size(); ++e) // what waits must be on its way
        flush(e);
      // Interrupted (a resend, a reroute, a failure the proxy must handle), or no
      // answer for a while (a straggler; other workers sending their operations in
      // another order, whose answers wait for this worker's next one): the rest goes out
      // unpaced, and the proxy is free sooner.
      if (!link.wait_answered(t, seq, c - window + 1,
                              std::chrono::steady_clock::now() + max_window_wait, since))
        window = 0;
    }
    h.chunk_index = c;
    iovec piece{nullptr, 0};
    auto hc = h; // this chunk's header (a packed chunk's flags and size are its own)
    if (op.sparse) {
      bool as_dense = !dense[c].empty();
      hc.kind = as_dense ? frame_kind::push : frame_kind::push_sparse;
      hc.payload_bytes = static_cast<uint32_t>(
        as_dense ? dense[c].size() * sizeof(float)
                 : pairs[c].size() * sizeof(protocol::sparse_pair));
      piece = {as_dense ? static_cast<void*>(dense[c].data())
                        : static_cast<void*>(pairs[c].data()),
               hc.payload_bytes};
      if (as_dense && half != 0)
        piece = pack(c, dense[c].data(), hc);
    } else if (half != 0) {
      piece = pack(c, op.src + layout.offset(c), hc);
    } else if (op.kind != worker_op::pull) {
      hc.payload_bytes = layout.length(c) * sizeof(float);
      piece = {const_cast<float*>(op.src + layout.offset(c)), hc.payload_bytes};
    }
    auto e = routes->connection_of(t, c);
    per_conn[e].headers.push_back(hc);
    per_conn[e].payloads.push_back(piece);
    if (per_conn[e].headers.size() == batch)
      flush(e);
    if (!to_replica)
      continue;
    auto r = routes->replica_connection_of(t, c);
    if (r == UINT32_MAX)
      continue;
    per_conn[r].headers.push_back(hc);
    per_conn[r].payloads.push_back(piece);
    if (per_conn[r].headers.size() == batch)
      flush(r);
  }
  for (size_t e = 0; e < per_conn.size(); ++e)
    flush(e);
  return !failed;
}

void start_next(proxy_ptr self, uint32_t t) {
  auto& st = self->state;
  auto& q = st.tensors[t];
  if (q.busy || q.waiting.empty())
    return;
  q.running = std::move(q.waiting.front());
  q.waiting.pop_front();
  if (st.lost) {
    fail(q.running, st.lost_code, st.lost_reason);
    start_next(self, t);
    return;
  }
  if (q.running.subscribe) { // nothing to wait for: updates come as they happen
    if (send_chunks(*st.link, t, q.running, q.clock))
      q.running.done->set_value();
    else
      fail(q.running, errc::io_error, "the connection to the node failed");
    q.running = {};
    start_next(self, t);
    return;
  }
  q.busy = true;
  q.seq = st.next_seq++;
  auto& op = q.running;
  // topk: the pairs this push sends are picked once, so a re-sent chunk sends the same.
  auto& z = st.link->compression();
  if (z.kind == compression_spec::topk && !op.sparse && op.src != nullptr
      && (op.kind == worker_op::push || op.kind == worker_op::push_pull)) {
    if (st.residuals.size() <= t)
      st.residuals.resize(st.tensors.size());
    detail::pick_topk(op, st.residuals[t], st.link->layout(t), z, q.clock);
  }
  bool expect_update = op.kind == worker_op::pull || op.kind == worker_op::push_pull;
  uint64_t version = 0;
  switch (op.kind) {
    case worker_op::init: version = 0; break;
    case worker_op::push: version = q.clock; break;
    case worker_op::pull:
      version = op.only_changed ? op.min_version + 1 : op.min_version;
      break;
    case worker_op::push_pull: version = q.clock + 1; break;
  }
  st.link->arm(t, q.seq, expect_update, op.dst, version, op.only_changed,
               op.kind == worker_op::init); // inits: replicas ack them too
  q.running_clock = q.clock;
  q.started_ns = runtime::trace::on() ? runtime::trace::now_ns() : 0;
  // A failed send: the receiver reports the close with its reason (lost_atom), which
  // fails `op`; with replicas the job may go on without that node (a reroute re-sends).
  // The push window, for push_pull: its answers wait for every worker's push of the
  // chunk (not for layer-wise optimizers, whose answers wait for the whole tensor).
  uint32_t window = 0;
  if (op.kind == worker_op::push_pull && st.push_window_bytes > 0 && !st.layerwise) {
    auto chunk = st.link->layout(t).chunk_elems * sizeof(float);
    // A replicated chunk's answer also waits for a node-to-node round trip (its sum to
    // the replica and the ack): four times the window covers it (bench/failover.sh:
    // replicas cost 1.38x the step with the plain window, 1.07x with this one).
    auto base = st.push_window_bytes;
    if (base == defaults::push_window_auto)
      base = std::max<uint64_t>(defaults::push_window_chunks * chunk,
                                defaults::push_window_min_bytes);
    auto bytes = base * (st.link->replicated() ? 4 : 1);
    window = static_cast<uint32_t>(std::max<uint64_t>(bytes / chunk, 4));
  }
  send_chunks(*st.link, t, op, q.clock, {}, q.seq, window);
  if (op.kind == worker_op::push || op.kind == worker_op::push_pull)
    ++q.clock;
  self->delayed_send(self, st.timeout, timeout_atom::value, t, q.seq);
}

void finish(proxy_ptr self, uint32_t t, uint64_t seq, errc code, const std::string& why) {
  auto& q = self->state.tensors[t];
  if (!q.busy || q.seq != seq)
    return;
  q.busy = false;
  if (q.started_ns != 0) {
    runtime::trace::complete(code == errc::ok ? op_name(q.running.kind)
                                              : "failed operation",
                             "worker", q.started_ns,
                             {self->state.link->job_id(), self->state.link->rank(), t,
                              runtime::trace::about::none, q.running_clock});
    q.started_ns = 0;
  }
  if (code == errc::ok)
    q.running.done->set_value();
  else
    fail(q.running, code, why);
  q.running = {};
  start_next(self, t);
}

// Sends again every chunk of a running operation that `where(tensor, chunk)` picks and
// whose answer (or replica's ack) has not come (a failure: lost_atom).
template <class Where>
void resend_where(proxy_ptr self, Where where) {
  auto& st = self->state;
  if (st.lost)
    return;
  for (uint32_t t = 0; t < st.tensors.size(); ++t) {
    auto& q = st.tensors[t];
    if (!q.busy)
      continue;
    auto count = st.link->layout(t).count();
    chunk_filter only(count, false);
    bool any = false;
    for (uint32_t c = 0; c < count; ++c)
      if (where(t, c) && !st.link->chunk_arrived(t, c))
        any = only[c] = true;
    if (any)
      send_chunks(*st.link, t, q.running, q.running_clock, only);
  }
}

worker_proxy_actor::behavior_type proxy_behavior(
  proxy_ptr self, std::shared_ptr<worker_link> link, std::chrono::milliseconds timeout,
  uint64_t start_clock, uint64_t push_window_bytes, bool layerwise) {
  auto& st = self->state;
  st.tensors.resize(link->num_tensors());
  for (auto& q : st.tensors)
    q.clock = start_clock;
  st.link = std::move(link);
  st.timeout = timeout;
  st.push_window_bytes = push_window_bytes;
  st.layerwise = layerwise;
  return {
    [=](submit_atom, worker_op& op) {
      auto t = op.tensor;
      self->state.tensors[t].waiting.push_back(std::move(op));
      start_next(self, t);
    },
    [=](done_atom, uint32_t t, uint64_t seq) { finish(self, t, seq, errc::ok, {}); },
    [=](fail_atom, uint32_t t, uint64_t seq, errc code, const std::string& why) {
      finish(self, t, seq, code, why);
    },
    [=](lost_atom, errc code, const std::string& why) {
      auto& st = self->state;
      st.lost = true;
      st.lost_code = code;
      st.lost_reason = why;
      for (uint32_t t = 0; t < st.tensors.size(); ++t)
        if (st.tensors[t].busy)
          finish(self, t, st.tensors[t].seq, code, why);
    },
    [=](resend_atom, uint32_t conn, uint32_t shard) {
      resend_where(self, [&](uint32_t t, uint32_t c) {
        auto& link = *self->state.link;
        return shard == UINT32_MAX ? link.touches(t, c, conn)
                                   : link.served_by(t, c, conn, shard);
      });
    },
    [=](reroute_atom, uint32_t conn) {
      resend_where(self, [&](uint32_t t, uint32_t c) {
        return self->state.link->homed_with(t, c, conn);
      });
    },
    [=](timeout_atom, uint32_t t, uint64_t seq) {
      auto& q = self->state.tensors[t];
      if (!q.busy || q.seq != seq)
        return;
      self->state.link->abandon(
        fmt::format("{} of tensor {} timed out: no answer from the node within {} ms",
                    op_name(q.running.kind), t, self->state.timeout.count()));
    },
    [=](bye_atom) {
      auto& link = *self->state.link;
      frame_header h;
      h.kind = frame_kind::bye;
      h.job_id = link.job_id();
      h.rank = link.rank();
      auto conns = link.conns();
      if (!self->state.lost)
        for (uint32_t i = 0; i < conns->size(); ++i)
          if (!link.retired(i))
            (*conns)[i]->send(h);
      if (!self->state.lost
          && link.companion()) // the node counts a leave on its TCP link
        link.companion()->send(h);
      return ok_atom::value;
    },
  };
}

} // namespace

worker_proxy_actor spawn_worker_proxy(caf::actor_system& sys,
                                      std::shared_ptr<worker_link> link,
                                      std::chrono::milliseconds request_timeout,
                                      uint64_t start_clock, uint64_t push_window_bytes,
                                      bool layerwise) {
  return sys.spawn(proxy_behavior, std::move(link), request_timeout, start_clock,
                   push_window_bytes, layerwise);
}

} // namespace rw::actors
