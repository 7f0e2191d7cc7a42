#include "worker/proxy.hpp"

#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "protocol/half.hpp"
#include "runtime/trace.hpp"
#include "worker/chunk_sender.hpp"
#include "worker/compression.hpp"
#include "worker/link.hpp"

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
  // The running operation's chunks still to send: its push window paused them, until
  // the link says enough are answered (window_atom, pause 0) or pause `pause`'s
  // max_window_wait is over (window_atom, that pause). Null: all sent.
  std::unique_ptr<chunk_sender> sender;
  uint64_t pause = 0;
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

void go_on(proxy_ptr self, uint32_t t);

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
  if (q.running.sets_clock) { // the next push carries min_version + 1
    q.clock = q.running.min_version;
    q.running.done->set_value();
    q.running = {};
    start_next(self, t);
    return;
  }
  if (q.running.subscribe) { // nothing to wait for: updates come as they happen
    if (chunk_sender{*st.link, t, q.running, q.clock}.run() == chunk_sender::sent)
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
  q.sender = std::make_unique<chunk_sender>(*st.link, t, op, q.clock, chunk_filter{},
                                            q.seq, window);
  if (op.kind == worker_op::push || op.kind == worker_op::push_pull)
    ++q.clock;
  self->delayed_send(self, st.timeout, timeout_atom::value, t, q.seq);
  go_on(self, t);
}

void go_on(proxy_ptr self, uint32_t t) {
  auto& q = self->state.tensors[t];
  // A failed send: the receiver reports the close with its reason (lost_atom).
  if (q.sender->run() != chunk_sender::paused) {
    q.sender.reset();
    return;
  }
  ++q.pause;
  runtime::trace::instant("window paused", "worker",
                          {self->state.link->job_id(), self->state.link->rank(), t,
                           runtime::trace::about::none, q.running_clock});
  self->delayed_send(self, max_window_wait, window_atom::value, t, q.seq, q.pause);
}

// The paused operations go on unpaced, so that what follows (a resend, a reroute) sees
// every chunk sent, as before a window.
void unpace_all(proxy_ptr self) {
  auto& st = self->state;
  for (uint32_t t = 0; t < st.tensors.size(); ++t)
    if (st.tensors[t].busy && st.tensors[t].sender) {
      st.tensors[t].sender->unpace();
      go_on(self, t);
    }
}

void finish(proxy_ptr self, uint32_t t, uint64_t seq, errc code, const std::string& why) {
  auto& q = self->state.tensors[t];
  if (!q.busy || q.seq != seq)
    return;
  q.busy = false;
  q.sender.reset();
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
  unpace_all(self);
  for (uint32_t t = 0; t < st.tensors.size(); ++t) {
    auto& q = st.tensors[t];
    if (!q.busy)
      continue;
    auto count = st.link->layout(t).count();
    chunk_filter only(count, false);
    bool any = false;
    for (uint32_t c = 0; c < count; ++c)
      if (where(t, c) && !st.link->chunk_arrived(t, c)) {
        any = only[c] = true;
        runtime::trace::instant(
          "sent again", "worker",
          {st.link->job_id(), st.link->rank(), t, c, q.running_clock});
      }
    if (any)
      chunk_sender{*st.link, t, q.running, q.running_clock, std::move(only)}.run();
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
    [=](reroute_atom, uint32_t conn, bool only_moved) {
      resend_where(self, [&](uint32_t t, uint32_t c) {
        auto& link = *self->state.link;
        return link.homed_with(t, c, conn)
               && (!only_moved || link.moved_by_reroute(t, c));
      });
    },
    [=](window_atom, uint32_t t, uint64_t seq, uint64_t pause) {
      auto& q = self->state.tensors[t];
      if (!q.busy || q.seq != seq || !q.sender)
        return;
      if (pause != 0) { // the wait is over: the rest goes unpaced
        if (pause != q.pause)
          return; // an earlier pause's
        q.sender->unpace();
        runtime::trace::instant("window unpaced", "worker",
                                {self->state.link->job_id(), self->state.link->rank(), t,
                                 runtime::trace::about::none, q.running_clock});
      }
      go_on(self, t);
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

// What the link's receiver tells the proxy, as messages to its actor.
class proxy_events final : public link_events {
public:
  explicit proxy_events(worker_proxy_actor proxy) : proxy_(std::move(proxy)) {}
  void done(uint32_t tensor, uint64_t seq) override {
    caf::anon_send(proxy_, done_atom::value, tensor, seq);
  }
  void failed(uint32_t tensor, uint64_t seq, errc code, std::string why) override {
    caf::anon_send(proxy_, fail_atom::value, tensor, seq, code, std::move(why));
  }
  void lost(errc code, std::string why) override {
    caf::anon_send(proxy_, lost_atom::value, code, std::move(why));
  }
  void resend(uint32_t conn, uint32_t shard) override {
    caf::anon_send(proxy_, resend_atom::value, conn, shard);
  }
  void reroute(uint32_t conn, bool only_moved) override {
    caf::anon_send(proxy_, reroute_atom::value, conn, only_moved);
  }
  void answered(uint32_t tensor, uint64_t seq) override {
    caf::anon_send(proxy_, window_atom::value, tensor, seq, uint64_t{0});
  }

private:
  worker_proxy_actor proxy_;
};

} // namespace

std::shared_ptr<link_events> events_of(worker_proxy_actor proxy) {
  return std::make_shared<proxy_events>(std::move(proxy));
}

worker_proxy_actor spawn_worker_proxy(caf::actor_system& sys,
                                      std::shared_ptr<worker_link> link,
                                      std::chrono::milliseconds request_timeout,
                                      uint64_t start_clock, uint64_t push_window_bytes,
                                      bool layerwise) {
  return sys.spawn(proxy_behavior, std::move(link), request_timeout, start_clock,
                   push_window_bytes, layerwise);
}

} // namespace rw::actors
