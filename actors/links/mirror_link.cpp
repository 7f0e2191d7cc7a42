#include "actors/links/mirror_link.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "protocol/control.hpp"
#include "transports/tcp/address.hpp"

namespace rw::actors {

using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

namespace {
constexpr size_t kept_rings = 4;
constexpr auto send_tick = std::chrono::milliseconds(100);
} // namespace

mirror_link::mirror_link(mirror_settings s) : s_(std::move(s)) {
  ep_ = std::make_shared<transports::tcp::endpoint>(
    s_.request_timeout, transports::receive_limits{0, defaults::max_control_bytes});
}

mirror_link::~mirror_link() {
  stop();
}

void mirror_link::start() {
  if (running_.exchange(true))
    return;
  reader_ = std::thread([this] { read_loop(); });
  sender_ = std::thread([this] { send_loop(); });
}

void mirror_link::stop() {
  if (!running_.exchange(false))
    return;
  { std::lock_guard<std::mutex> guard{mtx_}; } // a waiting sender sees it
  wake_.notify_all();
  if (sender_.joinable())
    sender_.join();
  if (reader_.joinable())
    reader_.join();
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& [address, p] : peers_)
    if (p.conn)
      p.conn->close();
  peers_.clear();
  pending_.clear();
}

void mirror_link::set_ring(uint64_t version, std::vector<std::string> addresses) {
  std::lock_guard<std::mutex> guard{mtx_};
  rings_[version] = std::move(addresses);
  while (rings_.size() > kept_rings)
    rings_.erase(rings_.begin());
}

void mirror_link::set_shard(uint32_t index, chunk_shard_actor shard) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (index < s_.shards.size())
    s_.shards[index] = std::move(shard);
}

void mirror_link::send(uint32_t shard, uint32_t tensor, uint32_t chunk, uint64_t clock,
                       uint64_t ring, uint32_t node, const float* sum, uint32_t length) {
  // A copy: the shard reuses its buffer after the step; sends share it.
  auto data = std::make_shared<const std::vector<float>>(sum, sum + length);
  bool idle = false;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& p = pending_[{tensor, chunk}];
    p.shard = shard;
    p.clock = clock;
    p.ring = ring;
    p.node = node;
    p.sum = std::move(data);
    p.sent_at = {};
    p.warned = false;
    idle = fresh_.empty();
    if (!p.queued) {
      p.queued = true;
      fresh_.emplace_back(tensor, chunk);
    }
  }
  if (idle)
    wake_.notify_one();
}

void mirror_link::cancel(uint32_t tensor, uint32_t chunk) {
  std::lock_guard<std::mutex> guard{mtx_};
  pending_.erase({tensor, chunk});
}

std::string mirror_link::address_of(uint64_t ring, uint32_t node) const {
  auto it = rings_.find(ring);
  if (it == rings_.end() || node >= it->second.size())
    return {};
  return it->second[node];
}

// The sending thread: new sums as they come; every sum unacked for retry_after again.
void mirror_link::send_loop() {
  std::unique_lock<std::mutex> lock{mtx_};
  auto last_scan = std::chrono::steady_clock::now();
  while (running_.load()) {
    wake_.wait_for(lock, send_tick, [&] { return !fresh_.empty() || !running_.load(); });
    if (!running_.load())
      return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_scan >= send_tick) {
      queue_overdue();
      last_scan = now;
    }
    transmit(lock);
  }
}

void mirror_link::queue_overdue() {
  auto now = std::chrono::steady_clock::now();
  for (auto& [k, p] : pending_) {
    if (p.queued)
      continue;
    // Unacked too long, or not sent (its node was not connected when it was due).
    if (p.sent_at == time_point{} || now - p.sent_at >= s_.retry_after) {
      p.sent_at = {};
      p.queued = true;
      fresh_.push_back(k);
    }
  }
}

void mirror_link::transmit(std::unique_lock<std::mutex>& lock) {
  constexpr size_t send_batch = 64;
  struct batch {
    transports::connection_ptr conn;
    std::string address;
    std::vector<frame_header> headers;
    std::vector<iovec> pieces;
    std::vector<std::shared_ptr<const std::vector<float>>> keep;
  };
  while (!fresh_.empty() && running_.load()) {
    std::map<std::string, batch> out; // by address
    size_t taken = 0;
    while (!fresh_.empty() && taken < send_batch) {
      auto k = fresh_.front();
      fresh_.pop_front();
      auto it = pending_.find(k);
      if (it == pending_.end())
        continue; // acked or cancelled
      auto& p = it->second;
      p.queued = false;
      auto address = address_of(p.ring, p.node);
      auto& node = peers_[address];
      if (address.empty() || !node.conn) { // sent once connected (queue_overdue)
        if (!address.empty()
            && std::find(wanted_.begin(), wanted_.end(), address) == wanted_.end())
          wanted_.push_back(address);
        continue;
      }
      auto& b = out[address];
      b.conn = node.conn;
      b.address = address;
      frame_header h;
      h.kind = frame_kind::push;
      h.flags = protocol::flag_replica;
      h.job_id = s_.job_id;
      h.rank = protocol::mirror_rank;
      h.tensor_id = k.first;
      h.chunk_index = k.second;
      h.clock = p.clock;
      h.ring = static_cast<uint32_t>(p.ring);
      h.payload_bytes = static_cast<uint32_t>(p.sum->size() * sizeof(float));
      b.headers.push_back(h);
      b.pieces.push_back({const_cast<float*>(p.sum->data()), h.payload_bytes});
      b.keep.push_back(p.sum); // an ack or a new sum may replace the entry meanwhile
      p.sent_at = std::chrono::steady_clock::now();
      ++taken;
    }
    if (out.empty())
      return;
    lock.unlock();
    for (auto& [address, b] : out)
      if (!b.conn->send_batch(b.headers.data(), b.pieces.data(),
                              static_cast<int>(b.headers.size()))) {
        spdlog::warn(
          "job {}: node {} could not send {} step sum(s) to the replica at {}; "
          "sent again in {} ms",
          s_.job_id, s_.node_name, b.headers.size(), address, s_.retry_after.count());
        b.conn->close();
      }
    lock.lock();
  }
}

// The reading thread: connects to the nodes the sender wants, then reads acks.
void mirror_link::read_loop() {
  while (running_.load(std::memory_order_acquire)) {
    connect_wanted();
    ep_->poll(20, *this);
    flush_acks();
  }
  ep_->close_all(*this);
}

void mirror_link::connect_wanted() {
  std::vector<std::string> wanted;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto now = std::chrono::steady_clock::now();
    for (auto& a : wanted_) {
      auto& p = peers_[a];
      if (!p.conn && (p.failed_at == time_point{} || now - p.failed_at >= s_.retry_after))
        wanted.push_back(a);
    }
    wanted_.clear();
  }
  for (auto& address : wanted) {
    join_request req;
    req.job = s_.spec;
    req.token = s_.token;
    req.transport = "tcp";
    req.connect_timeout = s_.connect_timeout;
    req.request_timeout = s_.request_timeout;
    transports::connection_ptr conn;
    std::string why;
    try {
      conn = join_as_mirror(*ep_, req, address, *this);
    } catch (const std::exception& e) {
      why = e.what();
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto& p = peers_[address];
      p.conn = conn;
      p.failed_at = conn ? time_point{} : std::chrono::steady_clock::now();
    }
    if (conn) {
      spdlog::info("job {}: node {} mirrors its chunks' steps to their replica at {}",
                   s_.job_id, s_.node_name, address);
      wake_.notify_one();
    } else {
      spdlog::warn(
        "job {}: node {} cannot reach the replica node at {}: {}; trying again "
        "in {} ms",
        s_.job_id, s_.node_name, address, why, s_.retry_after.count());
    }
  }
}

void mirror_link::flush_acks() {
  if (acks_.empty())
    return;
  std::vector<std::pair<chunk_shard_actor, std::vector<uint64_t>>> out;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& [shard, acks] : acks_)
      if (shard < s_.shards.size())
        out.emplace_back(s_.shards[shard], std::move(acks));
  }
  acks_.clear();
  for (auto& [shard, acks] : out)
    caf::anon_send(shard, mirror_atom::value, s_.job_id, std::move(acks));
}

payload_target mirror_link::on_header(const transports::connection_ptr& c,
                                      const frame_header& h) {
  if (h.kind == frame_kind::error) {
    auto& text = errors_.of(c).bytes;
    text.resize(h.payload_bytes);
    return payload_target::into(text.data());
  }
  return payload_target::dropped();
}

void mirror_link::on_frame(const transports::connection_ptr& c, const frame_header& h,
                           payload_target&) {
  if (h.kind == frame_kind::ack && (h.flags & protocol::flag_replica) != 0) {
    uint32_t shard = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto it = pending_.find({h.tensor_id, h.chunk_index});
      if (it == pending_.end() || it->second.clock != h.clock)
        return; // a repeat's ack, or of a sum cancelled since
      shard = it->second.shard;
      pending_.erase(it);
    }
    auto& acks = acks_[shard];
    acks.insert(acks.end(), {h.tensor_id, h.chunk_index, h.clock});
    return;
  }
  if (h.kind == frame_kind::resend) {
    // A shard of the replica's node was restarted: the sums queued in its mailbox died
    // with it. Every unacked sum goes again now, not after retry_after (the replica
    // drops a repeat and acks it): under a CPU hog a shard crash on the replica's node
    // cost the home's step the whole 1 s wait.
    size_t again = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& [k, p] : pending_) {
        if (p.queued)
          continue;
        p.sent_at = {};
        p.queued = true;
        fresh_.push_back(k);
        ++again;
      }
    }
    if (again > 0)
      wake_.notify_one();
    spdlog::info("job {}: a shard of the replica node at {} was restarted: {} unacked "
                 "sum(s) sent again",
                 s_.job_id, c->peer(), again);
    return;
  }
  if (h.kind != frame_kind::error)
    return;
  protocol::error_msg err;
  std::string why;
  auto& text = errors_.of(c).bytes;
  if (decode(text.data(), text.size(), err, why) != errc::ok)
    err = {errc::bad_frame, "undecodable error frame: " + why, {}};
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = pending_.find({h.tensor_id, h.chunk_index});
  if (it == pending_.end() || it->second.warned)
    return;
  it->second.warned = true;
  spdlog::warn(
    "job {}: the replica at {} refused the sum of chunk {}/{} (clock {}): {} ({}); "
    "sent again in {} ms",
    s_.job_id, c->peer(), h.tensor_id, h.chunk_index, h.clock, err.message,
    to_string(err.code), s_.retry_after.count());
}

void mirror_link::on_closed(const transports::connection_ptr& c, errc,
                            const std::string& why) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& [address, p] : peers_)
    if (p.conn == c) {
      if (running_.load())
        spdlog::warn("job {}: node {} lost its connection to the replica node at {}: {}",
                     s_.job_id, s_.node_name, address, why);
      p.conn = nullptr;
      p.failed_at = std::chrono::steady_clock::now();
    }
}

} // namespace rw::actors
