#include "actors/links/rack_uplink.hpp"

#include <utility>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "protocol/control.hpp"

namespace rw::actors {

using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

rack_uplink::rack_uplink(uplink_settings s) : s_(std::move(s)) {
  uint64_t total = 0;
  for (auto& t : s_.join.job.tensors) {
    first_.push_back(total);
    runtime::chunk_layout layout{t.elements, s_.join.job.chunk_bytes};
    for (uint32_t c = 0; c < layout.count(); ++c)
      lengths_.push_back(layout.length(c));
    total += layout.count();
  }
  slots_ = relay_slots{lengths_.size()};
  ep_ = std::make_shared<transports::tcp::endpoint>(
    s_.join.request_timeout,
    transports::receive_limits{s_.join.job.chunk_bytes, defaults::max_control_bytes});
}

rack_uplink::~rack_uplink() {
  stop();
}

void rack_uplink::start() {
  running_ = true;
  thread_ = std::thread([this] { run(); });
  sender_ = std::thread([this] { drain(); });
}

// The sender thread: once joined, sends what shards queued, in order.
void rack_uplink::drain() {
  std::unique_lock<std::mutex> lock{mtx_};
  while (true) {
    wake_.wait(lock, [&] {
      return !running_.load() || failed_.load() || (ready_ && !queued_.empty());
    });
    if (!running_.load() || failed_.load())
      return;
    auto p = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    send(p);
    lock.lock();
  }
}

void rack_uplink::enqueue(pending p) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queued_.push_back(std::move(p));
  }
  wake_.notify_one();
}

void rack_uplink::stop() {
  bool was_running = running_.exchange(false);
  { std::lock_guard<std::mutex> guard{mtx_}; } // the sender is waiting, or will see it
  wake_.notify_all();
  if (sender_.joinable())
    sender_.join();
  if (thread_.joinable())
    thread_.join();
  if (!was_running)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& c : joined_.conns) {
    frame_header bye;
    bye.kind = frame_kind::bye;
    bye.job_id = joined_.welcome.job_id;
    bye.rank = s_.join.rank;
    c->send(bye);
    c->close();
  }
}

void rack_uplink::fail(errc code, const std::string& why) {
  if (failed_.exchange(true))
    return;
  { std::lock_guard<std::mutex> guard{mtx_}; } // the sender is waiting, or will see it
  wake_.notify_all();
  spdlog::error("job {}: the top level of the hierarchical job failed on node {}: {}",
                s_.rack_job_id, s_.node_name, why);
  caf::anon_send(s_.coordinator, abort_atom::value, s_.rack_job_id, code,
                 fmt::format("the top level of the hierarchical job (rack-agg {} as rack "
                             "{}) failed: {}",
                             s_.node_name, s_.join.rank, why));
}

void rack_uplink::run() {
  try {
    auto joined = join_job(*ep_, s_.join);
    std::unique_lock<std::mutex> guard{mtx_};
    joined_ = std::move(joined);
    spdlog::info("job {}: rack-agg {} joined the top level '{}' as rack {} over {} "
                 "connection(s)",
                 s_.rack_job_id, s_.node_name, s_.join.job.name, s_.join.rank,
                 joined_.conns.size());
    // Tensors with initial values: every rack learns them from the chunks' homes. Not
    // in a job restored from a checkpoint (the top level goes on from a clock > 0): the
    // rack's part has its parameters from the checkpoint, and the homes would answer
    // with their current version, not version 0, which would land in a partial's
    // buffer (on_header) while that partial is on its way to the home.
    const bool restored = joined_.resume_clock > 0;
    if (restored)
      spdlog::info("job {}: the top level '{}' goes on from clock {}: no initial values "
                   "to learn",
                   s_.rack_job_id, s_.join.job.name, joined_.resume_clock);
    for (uint32_t t = 0; t < s_.join.job.tensors.size() && !restored; ++t) {
      if (!s_.join.job.tensors[t].has_init)
        continue;
      runtime::chunk_layout layout{s_.join.job.tensors[t].elements,
                                   s_.join.job.chunk_bytes};
      for (uint32_t c = 0; c < layout.count(); ++c) {
        pending p{};
        p.h.kind = frame_kind::pull;
        p.h.tensor_id = t;
        p.h.chunk_index = c;
        p.h.clock = 0;
        p.data = nullptr;
        queued_.push_front(std::move(p)); // before any push: version 0 comes first
      }
    }
    ready_ = true;
    guard.unlock();
    wake_.notify_one();
  } catch (const std::exception& e) {
    fail(errc::unavailable, std::string("could not join the top level: ") + e.what());
    return;
  }
  while (running_.load(std::memory_order_acquire) && !failed_.load())
    ep_->poll(50, *this);
}

void rack_uplink::send(pending& p) {
  p.h.job_id = joined_.welcome.job_id;
  p.h.rank = s_.join.rank;
  auto conn = joined_.conns.at(
    joined_.routes->connection_of(p.h.tensor_id, p.h.chunk_index));
  iovec piece{const_cast<float*>(p.copy.empty() ? p.data : p.copy.data()),
              p.h.payload_bytes};
  if (!conn->send(p.h, p.h.payload_bytes ? &piece : nullptr, p.h.payload_bytes ? 1 : 0))
    fail(errc::io_error, fmt::format("cannot send chunk {}/{} to its home at {}",
                                     p.h.tensor_id, p.h.chunk_index, conn->peer()));
}

void rack_uplink::push(uint32_t tensor, uint32_t chunk, uint64_t clock, float* partial) {
  pending p{};
  p.h.kind = frame_kind::push;
  p.h.flags = protocol::flag_want_result;
  p.h.tensor_id = tensor;
  p.h.chunk_index = chunk;
  p.h.clock = clock;
  p.h.payload_bytes = static_cast<uint32_t>(lengths_[seq(tensor, chunk)] * sizeof(float));
  p.data = partial;
  {
    // The home's answer comes back into the same buffer: the partial is in the
    // kernel's hands before the home can have answered.
    std::lock_guard<std::mutex> guard{mtx_};
    slots_.expect(seq(tensor, chunk), partial, clock + 1);
  }
  enqueue(std::move(p));
}

void rack_uplink::init(uint32_t tensor, uint32_t chunk, const float* values) {
  pending p{};
  p.h.kind = frame_kind::init;
  p.h.tensor_id = tensor;
  p.h.chunk_index = chunk;
  size_t n = lengths_[seq(tensor, chunk)];
  p.h.payload_bytes = static_cast<uint32_t>(n * sizeof(float));
  p.copy.assign(values, values + n); // the shard lets go of them at once
  enqueue(std::move(p));
}

payload_target rack_uplink::on_header(const transports::connection_ptr& c,
                                      const frame_header& h) {
  if (h.kind == frame_kind::update && h.tensor_id < first_.size()) {
    auto s = seq(h.tensor_id, h.chunk_index);
    if (s >= lengths_.size() || h.payload_bytes != lengths_[s] * sizeof(float))
      return payload_target::dropped();
    if (h.clock == 0) { // initial values: once per chunk, into a buffer of their own
      auto& buf = initials_[s];
      buf = std::make_shared<std::vector<float>>(lengths_[s]);
      return payload_target::into(reinterpret_cast<std::byte*>(buf->data()));
    }
    std::string why;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto* answer = slots_.target(s, h.clock)) // the answer to the partial
        return payload_target::into(reinterpret_cast<std::byte*>(answer));
      why = slots_.why_not(s);
    }
    stray_ = std::make_tuple(h.tensor_id, h.chunk_index, h.clock); // on_frame: let go
    spdlog::warn("job {}: node {} sent chunk {}/{} at version {}, which this rack did "
                 "not ask for ({}): dropped",
                 s_.rack_job_id, node_of(c), h.tensor_id, h.chunk_index, h.clock, why);
    return payload_target::dropped();
  }
  if (h.kind == frame_kind::error) {
    auto& text = errors_.of(c).bytes;
    text.resize(h.payload_bytes);
    return payload_target::into(text.data());
  }
  return payload_target::dropped();
}

void rack_uplink::on_frame(const transports::connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  if (h.kind == frame_kind::ack)
    return; // an init was taken
  if (h.kind == frame_kind::error) {
    protocol::error_msg err;
    std::string why;
    auto& text = errors_.of(c).bytes;
    if (decode(text.data(), text.size(), err, why) != errc::ok)
      err = {errc::bad_frame, "undecodable error frame: " + why, {}};
    if (err.code == errc::worker_left && h.tensor_id < first_.size()) {
      // Another rack has left (its workers are done): this step cannot complete, as a
      // step in a flat job cannot once a worker left. The job goes on ending.
      auto shard = s_.rack_routes->shard_of(h.tensor_id, h.chunk_index);
      caf::anon_send(s_.shards.at(shard), relay_atom::value,
                     relay_update{s_.rack_job_id, h.tensor_id, h.chunk_index, h.clock,
                                  nullptr, err.code, err.message});
      return;
    }
    fail(err.code, fmt::format("node {} at {} refused chunk {}/{}: {}", node_of(c),
                               c->peer(), h.tensor_id, h.chunk_index, err.message));
    return;
  }
  if (auto stray = std::exchange(stray_, std::nullopt);
      stray && h.kind == frame_kind::update
      && *stray == std::make_tuple(h.tensor_id, h.chunk_index, h.clock))
    return; // an update not asked for, dropped (on_header said so)
  if (h.kind != frame_kind::update || t.action == payload_target::discard) {
    fail(errc::bad_frame, fmt::format("unexpected {} frame from {}",
                                      protocol::to_string(h.kind), c->peer()));
    return;
  }
  auto s = seq(h.tensor_id, h.chunk_index);
  relay_update u{s_.rack_job_id, h.tensor_id, h.chunk_index, h.clock, nullptr};
  if (h.clock == 0) {
    u.keep = std::move(initials_[s]);
    initials_.erase(s);
    u.data = u.keep->data();
  } else {
    std::lock_guard<std::mutex> guard{mtx_};
    u.data = slots_.take(s); // one answer per partial
  }
  auto shard = s_.rack_routes->shard_of(h.tensor_id, h.chunk_index);
  caf::anon_send(s_.shards.at(shard), relay_atom::value, std::move(u));
}

void rack_uplink::on_closed(const transports::connection_ptr& c, errc code,
                            const std::string& why) {
  if (!running_.load())
    return;
  fail(code == errc::ok ? errc::unavailable : code,
       fmt::format("lost the connection to the job's node {} at {}: {}", node_of(c),
                   c->peer(), why));
}

std::string rack_uplink::node_of(const transports::connection_ptr& c) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < joined_.conns.size() && i < joined_.conn_nodes.size(); ++i)
    if (joined_.conns[i] == c)
      return joined_.conn_nodes[i];
  return "?";
}

} // namespace rw::actors
