#include "worker/link.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "protocol/control.hpp"
#include "protocol/half.hpp"
#include "transports/fabric/endpoint.hpp"

namespace rw::actors {

using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

namespace {
// Connections a link can hold in all (a node joining appends its own): far above any
// job's nodes times endpoints.
constexpr uint32_t max_link_connections = 1024;

std::vector<uint32_t> chunk_counts(const runtime::job_routes& routes) {
  std::vector<uint32_t> counts;
  for (uint32_t t = 0; t < routes.num_tensors(); ++t)
    counts.push_back(routes.layout(t).count());
  return counts;
}
} // namespace

worker_link::worker_link(std::shared_ptr<transports::endpoint> ep,
                         std::vector<transports::connection_ptr> conns, uint32_t job_id,
                         uint32_t rank, std::shared_ptr<const runtime::job_routes> routes,
                         std::unique_ptr<transports::shm::worker_channel> shm)
  : ep_(std::move(ep)), conns_(std::make_shared<const conn_list>(std::move(conns))),
    job_id_(job_id), rank_(rank), routes_(routes), shapes_(std::move(routes)),
    shm_(std::move(shm)), answers_(chunk_counts(*shapes_)),
    retired_capacity_(
      std::max<uint32_t>(max_link_connections, static_cast<uint32_t>(conns_->size()))) {
  retired_.reset(new std::atomic<bool>[retired_capacity_]);
  for (uint32_t i = 0; i < retired_capacity_; ++i)
    retired_[i].store(false);
}

worker_link::~worker_link() {
  stop("worker closed");
}

void worker_link::start(std::shared_ptr<link_events> events) {
  events_ = std::move(events);
  answers_.set_events(events_);
  running_ = true;
  receiver_ = std::thread([this] { run(); });
}

void worker_link::set_compression(const compression_spec& c) {
  compression_ = c;
  half_ = protocol::half_flag(c);
}

void worker_link::use_fabric(std::shared_ptr<transports::endpoint> fabric,
                             transports::connection_ptr companion) {
  fabric_ = std::move(fabric);
  companion_ = std::move(companion);
}

namespace {
transports::fabric::endpoint* as_fabric(const std::shared_ptr<transports::endpoint>& e) {
  return dynamic_cast<transports::fabric::endpoint*>(e.get());
}
} // namespace

std::shared_ptr<void> worker_link::pin(const void* p, size_t n) const {
  auto* f = as_fabric(fabric_);
  return f != nullptr ? f->pin(p, n) : nullptr;
}

std::pair<uint64_t, uint64_t> worker_link::fabric_registrations() const noexcept {
  auto* f = as_fabric(fabric_);
  if (f == nullptr)
    return {0, 0};
  return {f->registrations(), f->result_registrations()};
}

void worker_link::run() {
  receive();
  if (lost_) // told now that nothing lands in a buffer any more
    events_->lost(lost_->first, lost_->second);
}

void worker_link::receive() {
  if (fabric_) {
    // Answers arrive on the fabric endpoint (blocking there while idle); the TCP
    // endpoint says when the node goes away.
    while (running_ && !closed_) {
      fabric_->poll(20, *this);
      ep_->poll(0, *this);
    }
    return;
  }
  if (!shm_) {
    while (running_ && !closed_) {
      ep_->poll(100, *this);
      if (pending_)
        join_pending();
      if (reconnecting_)
        reconnect_nodes();
    }
    return;
  }
  // Shared memory: completions arrive in the segment; the TCP connection still says
  // when the node goes away (and carries errors about control frames).
  while (running_ && !closed_) {
    transports::shm::completion c;
    int drained = 0;
    while (drained < 4096 && shm_->next_completion(c)) {
      on_completion(c);
      ++drained;
    }
    ep_->poll(0, *this);
    if (drained == 0) {
      // A set_hyper or optimizer-state call waits for a TCP answer: wait on the socket
      // (a millisecond at most) rather than the segment's bell, which TCP never rings.
      if (control_calls_.load(std::memory_order_acquire) > 0)
        ep_->poll(1, *this);
      else
        shm_->wait(20);
    }
  }
}

void worker_link::on_completion(const transports::shm::completion& c) {
  using transports::shm::completion;
  if (c.tensor >= answers_.num_tensors())
    return;
  if (c.kind == completion::error) {
    answers_.fail(c.tensor, static_cast<errc>(c.code), shm_->error_text(c.extra));
    return;
  }
  auto& l = layout(c.tensor);
  if (c.chunk >= l.count())
    return;
  auto* result = shm_->result(c.tensor);
  // The caller reads elsewhere than the segment: one copy.
  auto copy = [&](float* dst) {
    if (dst != nullptr && dst != result)
      copy_result(dst + l.offset(c.chunk), result + l.offset(c.chunk), l.length(c.chunk));
  };
  if (c.kind == completion::published) {
    answers_.published(c.tensor, c.chunk, c.clock, copy);
    return;
  }
  bool is_update = c.kind == completion::update;
  // An answer to an operation that already failed is dropped.
  answers_.answer_whole(c.tensor, c.chunk, is_update, c.kind == completion::unchanged,
                        c.clock, c.extra, copy);
}

void worker_link::copy_result(float* dst, const float* result, uint32_t length) const {
  std::memcpy(dst, result, size_t{length} * sizeof(float));
  // compress_updates: what a worker over the network gets (the node's are float32).
  if (compression_.updates)
    protocol::round_half(half_, dst, length);
}

void worker_link::abandon(const std::string& why) {
  abandoned_.store(true, std::memory_order_release); // closes from here on are ours
  {
    std::lock_guard<std::mutex> guard{reason_mtx_};
    if (close_reason_.empty())
      close_reason_ = why;
  }
  for (auto& c : *conns())
    c->close();
  if (companion_)
    companion_->close();
}

void worker_link::stop(const std::string& why) {
  abandon(why);
  wake_callers(); // a set_hyper or optimizer-state call waiting gives up

  running_ = false;
  if (receiver_.joinable())
    receiver_.join();
}

void worker_link::arm(uint32_t tensor, uint64_t seq, bool expect_update, float* dst,
                      uint64_t version, bool changes_only, bool mirrored) {
  auto& l = layout(tensor);
  auto count = l.count();
  auto r = routes();
  // Where the results go, for a transport that writes them there itself (fabric):
  // told before the operation's first frame, on the connection its answers come by.
  if (expect_update && dst != nullptr)
    for (auto& c : *conns())
      c->place_results(tensor, dst, l.elements * sizeof(float),
                       l.chunk_elems * sizeof(float));
  std::vector<uint8_t> replica_awaited;
  if (mirrored && replicas_ > 0 && multi_node_) {
    replica_awaited.assign(count, 0);
    for (uint32_t c = 0; c < count; ++c)
      replica_awaited[c] = r->replica_of(tensor, c) != UINT32_MAX ? 1 : 0;
  }
  answers_.arm(tensor, armed_op{seq, expect_update, dst, version, changes_only},
               replica_awaited);
}

void worker_link::set_subscription(uint32_t tensor, float* dst,
                                   std::function<void(uint64_t)> on_version) {
  answers_.subscribe(tensor, dst, std::move(on_version));
}

bool worker_link::wake_when_answered(uint32_t tensor, uint64_t seq, uint32_t answered) {
  return closed() || answers_.wake_when_answered(tensor, seq, answered);
}

bool worker_link::chunk_arrived(uint32_t tensor, uint32_t chunk) const {
  return answers_.chunk_arrived(tensor, chunk);
}

uint64_t worker_link::request_hyper(const std::vector<std::byte>& payload,
                                    std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> one{hyper_call_};
  control_call awaiting{*this};
  {
    std::lock_guard<std::mutex> guard{hyper_mtx_};
    hyper_answer_.reset();
  }
  frame_header h;
  h.kind = frame_kind::hyper;
  h.job_id = job_id_;
  h.rank = rank_;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{const_cast<std::byte*>(payload.data()), payload.size()};
  auto list = conns();
  if (closed() || list->empty() || !list->front()->send(h, &iov, 1))
    throw rw::error(errc::io_error,
                    "cannot send the hyper-parameter change: the worker's "
                    "connection to its node is closed");
  std::unique_lock<std::mutex> guard{hyper_mtx_};
  if (!hyper_cv_.wait_for(guard, timeout,
                          [&] { return hyper_answer_.has_value() || closed(); }))
    throw rw::error(errc::timeout, fmt::format("no answer to the hyper-parameter change "
                                               "within {} ms",
                                               timeout.count()));
  if (!hyper_answer_)
    throw rw::error(errc::io_error,
                    "the worker's connection closed before the node answered "
                    "the hyper-parameter change");
  auto& [answer, text] = *hyper_answer_;
  if (answer.error_code == errc::ok)
    return answer.clock;
  protocol::error_msg err;
  std::string why;
  if (protocol::decode(text.data(), text.size(), err, why) != errc::ok)
    err = {answer.error_code, "the node refused the change (" + why + ")", {}};
  throw rw::error(answer.error_code, err.message);
}

payload_target worker_link::on_header(const transports::connection_ptr& c,
                                      const frame_header& h) {
  auto land = [&](size_t bytes) {
    auto& buf = landing_.of(c).bytes;
    buf.resize(bytes);
    return payload_target::into(bytes == 0 ? nullptr : buf.data());
  };
  if (h.kind == frame_kind::hyper) {
    if (h.payload_bytes > 64 * 1024)
      return payload_target::dropped();
    return land(h.payload_bytes);
  }
  if (h.kind == frame_kind::error)
    return land(h.payload_bytes);
  if (h.kind == frame_kind::state)
    return on_state_header(c, h);
  if (h.kind == frame_kind::resend && h.payload_bytes == 0)
    return payload_target::into(nullptr);
  if (h.kind == frame_kind::reroute) {
    constexpr uint32_t max_reroute_bytes = 64 * 1024;
    if (h.payload_bytes > max_reroute_bytes)
      return payload_target::dropped();
    return land(h.payload_bytes);
  }
  if (h.kind != frame_kind::update && h.kind != frame_kind::ack) {
    spdlog::warn("worker rank {}: unexpected {} frame from the node; dropped", rank_,
                 protocol::to_string(h.kind));
    return payload_target::dropped();
  }
  wire_received_.fetch_add(protocol::frame_header_bytes + h.payload_bytes,
                           std::memory_order_relaxed);
  if (h.tensor_id >= answers_.num_tensors()
      || h.chunk_index >= layout(h.tensor_id).count())
    return payload_target::dropped();
  if (h.kind == frame_kind::ack && (h.flags & protocol::flag_replica) != 0)
    return h.payload_bytes == 0 ? payload_target::into(nullptr)
                                : payload_target::dropped();
  auto& layout = this->layout(h.tensor_id);
  const auto half = static_cast<uint16_t>(h.flags & protocol::flag_half);
  const auto expect = half != 0 && h.kind == frame_kind::update
                        ? protocol::half_payload_bytes(half, layout.length(h.chunk_index))
                        : layout.length(h.chunk_index) * sizeof(float);
  // A 16-bit update lands in its connection's buffer, widened into its place once it is
  // in (other connections' frames may come in between).
  // An operation's buffer (not a subscription's) counts the landing until on_frame.
  auto into = [&](float* dst, bool armed) {
    auto& l = landing_.of(c);
    if (armed)
      l.extra.tensor = h.tensor_id;
    if (half == 0)
      return payload_target::into(reinterpret_cast<std::byte*>(dst));
    l.bytes.resize(expect);
    l.extra.dst = dst;
    return payload_target::into(l.bytes.data());
  };
  if (h.kind == frame_kind::update && (h.flags & protocol::flag_subscribe)) {
    auto* sub = answers_.subscription(h.tensor_id);
    if (sub == nullptr || h.payload_bytes != expect)
      return payload_target::dropped();
    return into(sub + layout.offset(h.chunk_index), false);
  }
  bool is_update = h.kind == frame_kind::update;
  bool unchanged = !is_update && (h.flags & protocol::flag_only_changed) != 0;
  float* dst = nullptr;
  switch (answers_.begin(h.tensor_id, h.chunk_index, is_update, unchanged, h.clock,
                         h.payload_bytes == expect, dst)) {
    case answer_verdict::stale:
      return payload_target::dropped(); // a late answer to an operation that failed
    case answer_verdict::ack: return payload_target::into(nullptr);
    case answer_verdict::bad_length:
      spdlog::error("worker rank {}: node sent {} bytes for chunk {}/{} of {}", rank_,
                    h.payload_bytes, h.tensor_id, h.chunk_index, expect);
      return payload_target::dropped();
    case answer_verdict::land: break;
  }
  return into(dst + layout.offset(h.chunk_index), true);
}

void worker_link::on_frame(const transports::connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  if (t.action == payload_target::discard)
    return;
  if (h.kind == frame_kind::update && (h.flags & protocol::flag_half) != 0) {
    auto length = layout(h.tensor_id).length(h.chunk_index);
    auto& l = landing_.of(c);
    auto why = protocol::widen_half(h.flags & protocol::flag_half, l.bytes.data(),
                                    h.payload_bytes, l.extra.dst, length);
    if (!why.empty()) {
      release_landing(c);
      lose(errc::bad_frame,
           fmt::format("the node sent chunk {}/{} as a 16-bit chunk that "
                       "does not decode: {}",
                       h.tensor_id, h.chunk_index, why));
      return;
    }
  }
  if (h.kind == frame_kind::hyper) {
    {
      std::lock_guard<std::mutex> guard{hyper_mtx_};
      hyper_answer_.emplace(h, landing_.of(c).bytes);
    }
    hyper_cv_.notify_all();
    return;
  }
  if (h.kind == frame_kind::reroute) {
    if (auto i = index_of(c); i != UINT32_MAX)
      on_reroute(i, landing_.of(c).bytes);
    return;
  }
  if (h.kind == frame_kind::state) {
    on_state_frame(c, h);
    return;
  }
  if (h.kind == frame_kind::resend) {
    if (auto i = index_of(c); i != UINT32_MAX) {
      events_->resend(i, h.chunk_index);
    }
    return;
  }
  if (h.kind == frame_kind::error) {
    protocol::error_msg err;
    std::string why;
    auto& text = landing_.of(c).bytes;
    if (decode(text.data(), text.size(), err, why) != errc::ok)
      err = {errc::bad_frame, "undecodable error frame from the node: " + why, {}};
    if (on_state_error(h, err.code, err.message))
      return;
    if (answers_.fail(h.tensor_id, err.code, err.message))
      return;
    // Late errors about an operation that already failed (its other chunks).
    spdlog::debug("worker rank {}: error from the node: {} ({})", rank_, err.message,
                  to_string(err.code));
    return;
  }
  if (h.kind == frame_kind::ack && (h.flags & protocol::flag_replica) != 0) {
    answers_.replica_acked(h.tensor_id, h.chunk_index, h.clock);
    return;
  }
  if (h.kind == frame_kind::update && (h.flags & protocol::flag_subscribe)) {
    answers_.published(h.tensor_id, h.chunk_index, h.clock);
    return;
  }
  // Its payload is in: an outcome held for it may be told (the operation is then
  // disarmed, and this answer is not counted).
  auto& into = landing_.of(c).extra;
  bool landing = into.tensor != UINT32_MAX;
  into.tensor = UINT32_MAX;
  bool is_update = h.kind == frame_kind::update;
  answers_.answered(h.tensor_id, h.chunk_index, is_update ? h.staleness : 0, is_update,
                    landing);
}

uint32_t worker_link::index_of(const transports::connection_ptr& c) const {
  auto list = conns();
  auto at = std::find(list->begin(), list->end(), c);
  return at == list->end() ? UINT32_MAX : static_cast<uint32_t>(at - list->begin());
}

void worker_link::release_landing(const transports::connection_ptr& c) {
  auto& into = landing_.of(c).extra;
  if (into.tensor == UINT32_MAX)
    return;
  answers_.landed(into.tensor);
  into.tensor = UINT32_MAX;
}

void worker_link::on_closed(const transports::connection_ptr& gone, errc code,
                            const std::string& why) {
  release_landing(gone); // closed mid-payload: nothing more lands from it
  landing_.forget(gone);
  if (fabric_ && (gone == companion_ || index_of(gone) != UINT32_MAX)) {
    // Either half of a fabric link: no reconnect (a hello again would be over TCP).
    lose(code == errc::ok ? errc::io_error : code,
         fmt::format("{} to the node lost: {}",
                     gone == companion_ ? "the TCP link beside the fabric connection"
                                        : "the fabric connection",
                     why));
    return;
  }
  auto index = index_of(gone);
  bool known = index != UINT32_MAX;
  if (!known) {
    // Not one of the link's: a hello to a node that failed (its connection closed by the
    // join), or a connection a reconnect replaced.
    spdlog::debug("worker rank {}: a connection the link does not hold closed: {}", rank_,
                  why);
    return;
  }
  if (retired(index)) {
    spdlog::debug("worker rank {}: a connection the job no longer uses closed: {}", rank_,
                  why);
    return; // a node the job left, or one being reconnected: expected
  }
  bool running = !closed_.load() && !abandoned_.load();
  if (running && begin_reconnect(index, why))
    return; // said hello to again between two polls
  std::string node;
  if (running && replicas_ > 0 && retire_node_of(index, node)) {
    // Its chunks' replicas take over: the nodes left send a reroute; until then what
    // is unanswered waits (bounded by the request timeout).
    spdlog::warn(
      "worker rank {}: node {} of job {} closed its connection ({}); its chunks' "
      "replicas take over: waiting for the job's new ring",
      rank_, node, job_id_, why);
    return;
  }
  lose(code == errc::ok ? errc::io_error : code,
       fmt::format("connection to the node lost: {}", why));
}

void worker_link::wake_callers() {
  // Under each mutex once: a caller between its check of closed() and its wait is
  // then waiting, and is woken.
  { std::lock_guard<std::mutex> guard{hyper_mtx_}; }
  hyper_cv_.notify_all();
  { std::lock_guard<std::mutex> guard{state_mtx_}; }
  state_cv_.notify_all();
}

void worker_link::lose(errc code, const std::string& why) {
  if (closed_.exchange(true))
    return; // the first connection to go takes the others down; report once
  for (auto& c : *conns())
    c->close();
  if (companion_)
    companion_->close();
  std::string reason = why;
  auto lost_code = code;
  {
    std::lock_guard<std::mutex> guard{reason_mtx_};
    if (!close_reason_.empty()) {
      reason = close_reason_;
      if (close_reason_.find("timed out") != std::string::npos)
        lost_code = errc::timeout;
    }
  }
  lost_.emplace(lost_code, std::move(reason)); // told once the receiver has stopped (run)
  wake_callers(); // a call waiting for an answer gives up now
}

} // namespace rw::actors
