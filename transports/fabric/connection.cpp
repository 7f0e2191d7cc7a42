#include "transports/fabric/connection.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace rw::transports::fabric {

namespace {
using clock_type = std::chrono::steady_clock;
constexpr int max_pieces = 8; // gathered per write; more go through the bounce buffer
constexpr int bounced = -2;   // post() completed the frame itself (bounce buffer)
} // namespace

connection::connection(std::shared_ptr<core> c, std::string peer, uint32_t slot_bytes,
                       std::unique_ptr<slot_pool::window> slots, int io_timeout_ms,
                       uint64_t send_queue_bytes)
  : core_(std::move(c)), peer_(std::move(peer)), io_timeout_ms_(io_timeout_ms),
    slot_bytes_(slot_bytes),
    slot_count_(
      static_cast<uint32_t>(std::min<uint64_t>(slots->size() / slot_bytes, max_slots))),
    slots_(std::move(slots)), occupied_(new std::atomic<bool>[slot_count_]) {
  send_queue_bytes_ = send_queue_bytes;
  for (uint32_t i = 0; i < slot_count_; ++i)
    occupied_[i].store(false);
}

connection::~connection() {
  if (bound_)
    fi_av_remove(core_->av, &peer_addr_, 1, 0);
}

protocol::fabric_offer connection::offer() const {
  protocol::fabric_offer o;
  o.provider = core_->dom->provider();
  o.address = core_->address();
  o.slots_address = slots_->registration().remote_address(slots_->data());
  o.slots_key = slots_->registration().key();
  o.slot_bytes = slot_bytes_;
  o.slot_count = slot_count_;
  o.conn_index = index_;
  o.frame_notices = true;
  o.credit_batch = credit_batch_accepted;
  return o;
}

void connection::bind(const protocol::fabric_offer& peer) {
  if (peer.provider != core_->dom->provider())
    throw rw::error(errc::bad_frame,
                    fmt::format("fabric: the peer runs provider '{}', this side '{}'",
                                peer.provider, core_->dom->provider()));
  if (peer.slot_bytes < protocol::frame_header_bytes + 64 || peer.slot_count == 0
      || peer.slot_count > max_slots || peer.conn_index >= max_connections)
    throw rw::error(
      errc::bad_frame,
      fmt::format("fabric: the peer offers {} slots of {} bytes as connection "
                  "{}: out of range",
                  peer.slot_count, peer.slot_bytes, peer.conn_index));
  if (!peer.frame_notices)
    throw rw::error(errc::bad_frame,
                    "fabric: the peer announces frames by a write's immediate (a build "
                    "older than frame notices): run the same RackWeave on both sides");
  fi_addr_t addr = FI_ADDR_UNSPEC;
  auto n = fi_av_insert(core_->av, peer.address.data(), 1, &addr, 0, nullptr);
  if (n != 1)
    throw rw::error(
      errc::bad_frame,
      fmt::format("fabric: provider {} refused the peer's {}-byte address ({})",
                  core_->dom->provider_name(), peer.address.size(),
                  n < 0 ? fi_error_text(n) : std::string{"not inserted"}));
  std::lock_guard<std::mutex> guard{credit_mtx_};
  peer_addr_ = addr;
  source_.store(addr, std::memory_order_release);
  peer_index_ = peer.conn_index;
  peer_slots_ = peer.slots_address;
  peer_key_ = peer.slots_key;
  peer_slot_bytes_ = peer.slot_bytes;
  peer_slot_count_ = peer.slot_count;
  // The peer takes up to creditBatch slots per credit message (0 from an older peer:
  // one), as many as this side's inject carries; owing an eighth of this side's slots
  // at most keeps the peer's window from shrinking by more. Owing no more than one
  // message holds, every batch due goes in one.
  const auto per_message = std::clamp<uint32_t>(peer.credit_batch, 1,
                                                core_->credits_per_message());
  owed_.set_batch_at(std::clamp<uint32_t>(slot_count_ / 8, 1, per_message));
  for (uint32_t s = 0; s < peer.slot_count; ++s)
    credits_.push_back(s);
  out_.assign(peer.slot_count, false);
  // A credit may come back before its write's completion; a placed write in order
  // takes two ops.
  auto ops = 3 * peer.slot_count;
  ops_.reset(new tx_op[ops]);
  op_slot_.assign(ops, 0);
  for (uint32_t i = 0; i < ops; ++i)
    free_ops_.push_back(static_cast<int>(i));
  headers_.resize(size_t{ops} * op_bytes);
  headers_region_ = std::make_unique<region>(*core_->dom, headers_.data(),
                                             headers_.size(), FI_SEND | FI_WRITE);
  paired_.assign(ops, -1);
  bounce_.resize(peer.slot_bytes);
  bound_ = true;
}

bool connection::is_open() const noexcept {
  return open_.load(std::memory_order_acquire);
}

void connection::fail(errc code, const std::string& why) {
  {
    std::lock_guard<std::mutex> guard{why_mtx_};
    if (!open_.load())
      return;
    why_ = why;
    close_code_ = code;
    open_.store(false, std::memory_order_release);
  }
  credit_cv_.notify_all();
  core_->closed_epoch.fetch_add(1);
  if (core_->rx_waitable)
    fi_cq_signal(core_->rx_cq); // the endpoint reports the close now, not at its timeout
}

void connection::close() {
  fail(errc::ok, "closed");
}

std::string connection::close_reason() const {
  std::lock_guard<std::mutex> guard{why_mtx_};
  return why_;
}

int connection::take_credit() {
  std::unique_lock<std::mutex> lock{credit_mtx_};
  auto deadline = clock_type::now() + std::chrono::milliseconds(io_timeout_ms_);
  while (credits_.empty() && is_open()) {
    // Credits arrive on the endpoint's thread; meanwhile keep the transmit queue moving.
    lock.unlock();
    core_->progress_tx();
    lock.lock();
    if (credits_.empty() && is_open()
        && credit_cv_.wait_until(
             lock, std::min(deadline, clock_type::now() + std::chrono::milliseconds(1)))
             == std::cv_status::timeout
        && clock_type::now() >= deadline) {
      lock.unlock();
      fail(errc::timeout,
           fmt::format("the peer gave no slot back within {} ms (all {} were "
                       "in use: it stopped reading)",
                       io_timeout_ms_, peer_slot_count_));
      return -1;
    }
  }
  if (!is_open())
    return -1;
  auto s = credits_.front();
  credits_.pop_front();
  out_[s] = true;
  return static_cast<int>(s);
}

int connection::take_op() {
  std::unique_lock<std::mutex> lock{credit_mtx_};
  auto deadline = clock_type::now() + std::chrono::milliseconds(io_timeout_ms_);
  while (free_ops_.empty()) {
    lock.unlock();
    core_->progress_tx();
    reap(); // ops a batch left in flight (post_batch), finished meanwhile
    std::this_thread::yield();
    lock.lock();
    if (clock_type::now() >= deadline || !is_open())
      return -1;
  }
  auto op = free_ops_.back();
  free_ops_.pop_back();
  paired_[op] = -1;
  return op;
}

bool connection::credit(const uint16_t* slots, size_t n) noexcept {
  bool all = true;
  size_t taken = 0;
  {
    std::lock_guard<std::mutex> guard{credit_mtx_};
    for (; taken < n; ++taken) {
      auto s = slots[taken];
      if (s >= peer_slot_count_ || !out_[s]) {
        all = false;
        break;
      }
      out_[s] = false;
      credits_.push_back(s);
    }
  }
  if (taken > 0)
    credit_cv_.notify_all();
  return all;
}

bool connection::issue(int op, const iovec* iov, void** desc, size_t pieces,
                       const fi_rma_iov* rma, size_t targets, uint64_t data,
                       bool with_data) {
  fi_msg_rma msg{};
  msg.msg_iov = iov;
  msg.desc = desc;
  msg.iov_count = pieces;
  msg.addr = peer_addr_;
  msg.rma_iov = rma;
  msg.rma_iov_count = targets;
  msg.context = ops_[op].context;
  ops_[op].state.store(tx_op::pending);
  auto deadline = clock_type::now() + std::chrono::milliseconds(io_timeout_ms_);
  while (true) {
    auto rc = fi_writemsg(core_->ep, &msg, FI_COMPLETION);
    if (rc == 0)
      break;
    if (rc != -FI_EAGAIN || clock_type::now() >= deadline) {
      ops_[op].state.store(tx_op::idle);
      {
        std::lock_guard<std::mutex> guard{credit_mtx_};
        free_ops_.push_back(op);
      }
      fail(errc::io_error,
           fmt::format("an RMA write to the peer failed: {}", fi_error_text(rc)));
      return false;
    }
    core_->progress_tx();
    std::this_thread::yield();
  }
  // The notice goes after the write (the provider delivers it after the write's data);
  // the op stays in flight either way, its completion frees it.
  if (with_data
      && !core_->send_notice(peer_addr_, static_cast<uint32_t>(data), io_timeout_ms_)) {
    fail(errc::io_error, "the provider would not take a frame notice for the peer");
    return false;
  }
  return true;
}

int connection::post(const protocol::frame_header& h, const iovec* payload, int count) {
  if (!is_open() || !bound_)
    return -1;
  size_t total = 0;
  for (int i = 0; i < count; ++i)
    total += payload[i].iov_len;
  fi_rma_iov target{};
  bool placed = total > 0 && target_of(h, total, target);
  if (!placed && protocol::frame_header_bytes + total > peer_slot_bytes_) {
    fail(errc::frame_too_large,
         fmt::format("a {} frame of {} bytes does not fit the peer's {}-byte slots",
                     to_string(h.kind), total, peer_slot_bytes_));
    return -1;
  }
  auto slot = take_credit();
  if (slot < 0)
    return -1;
  auto op = take_op();
  if (op < 0) {
    fail(errc::timeout, fmt::format("no write completed within {} ms", io_timeout_ms_));
    return -1;
  }
  op_slot_[op] = static_cast<uint32_t>(slot);
  auto* header = headers_.data() + size_t(op) * op_bytes;
  if (placed) {
    auto flagged = h;
    flagged.flags |= protocol::flag_placed;
    encode(flagged, header);
  } else {
    encode(h, header);
  }

  // The local pieces: the header, then the payload (gathered where the caller keeps
  // it, or through the bounce buffer when the provider gathers fewer pieces).
  iovec iov[max_pieces + 1];
  void* desc[max_pieces + 1];
  std::shared_ptr<region> held[max_pieces + 1];
  size_t pieces = 0;
  std::unique_lock<std::mutex> bounce_lock;
  auto limit = std::min<size_t>(core_->dom->iov_limit(), max_pieces + 1);
  if (!placed && total <= inline_payload_bytes) {
    // A small payload (a place or error frame, a credit) goes behind its header in the
    // op's registered memory: sending it registers nothing, wherever the caller keeps it.
    size_t at = protocol::frame_header_bytes;
    for (int i = 0; i < count; ++i) {
      std::memcpy(header + at, payload[i].iov_base, payload[i].iov_len);
      at += payload[i].iov_len;
    }
    iov[0] = {header, at};
    desc[0] = headers_region_->desc();
    pieces = 1;
  } else if (size_t(count) + 1 > limit) {
    bounce_lock = std::unique_lock<std::mutex>{bounce_mtx_};
    if (bounce_.size() < protocol::frame_header_bytes + total)
      bounce_.resize(protocol::frame_header_bytes + total);
    std::memcpy(bounce_.data(), header, protocol::frame_header_bytes);
    size_t at = protocol::frame_header_bytes;
    for (int i = 0; i < count; ++i) {
      std::memcpy(bounce_.data() + at, payload[i].iov_base, payload[i].iov_len);
      at += payload[i].iov_len;
    }
    try {
      held[0] = core_->send_memory->get(bounce_.data(), bounce_.size());
    } catch (const rw::error& e) {
      fail(e.code(), e.what());
      return -1;
    }
    iov[0] = {bounce_.data(), at};
    desc[0] = held[0]->desc();
    pieces = 1;
  } else {
    iov[0] = {header, protocol::frame_header_bytes};
    desc[0] = headers_region_->desc();
    pieces = 1;
    for (int i = 0; i < count; ++i) {
      if (payload[i].iov_len == 0)
        continue;
      try {
        held[pieces] = core_->send_memory->get(payload[i].iov_base, payload[i].iov_len);
      } catch (const rw::error& e) {
        fail(e.code(), e.what());
        return -1;
      }
      iov[pieces] = payload[i];
      desc[pieces] = held[pieces]->desc();
      ++pieces;
    }
  }
  auto imm = frame_notice(peer_index_, static_cast<uint32_t>(slot));
  auto slot_addr = peer_slots_ + uint64_t(slot) * peer_slot_bytes_;
  bool ok;
  if (!placed) {
    fi_rma_iov rma{slot_addr, protocol::frame_header_bytes + total, peer_key_};
    ok = issue(op, iov, desc, pieces, &rma, 1, imm, true);
  } else if (core_->place_mode == placement::scatter) {
    // One write, two places: the header into the slot, the payload into the buffer.
    fi_rma_iov rma[2] = {{slot_addr, protocol::frame_header_bytes, peer_key_}, target};
    ok = issue(op, iov, desc, pieces, rma, 2, imm, true);
  } else {
    // The header first, then the payload with the immediate: placed in that order.
    auto first = take_op();
    if (first < 0) {
      fail(errc::timeout, fmt::format("no write completed within {} ms", io_timeout_ms_));
      return -1;
    }
    std::memcpy(headers_.data() + size_t(first) * op_bytes, header,
                protocol::frame_header_bytes);
    iovec head{headers_.data() + size_t(first) * op_bytes, protocol::frame_header_bytes};
    void* head_desc = headers_region_->desc();
    fi_rma_iov to_slot{slot_addr, protocol::frame_header_bytes, peer_key_};
    if (!issue(first, &head, &head_desc, 1, &to_slot, 1, 0, false))
      return -1;
    paired_[op] = first;
    iovec body[max_pieces + 1];
    size_t n = 0;
    if (bounce_lock.owns_lock()) {
      body[n++] = {bounce_.data() + protocol::frame_header_bytes, total};
    } else {
      for (size_t i = 1; i < pieces; ++i)
        body[n++] = iov[i];
    }
    ok = issue(op, body, bounce_lock.owns_lock() ? desc : desc + 1, n, &target, 1, imm,
               true);
    if (!ok) {
      wait(first);
      return -1;
    }
  }
  if (!ok)
    return -1;
  sent_.fetch_add(1, std::memory_order_relaxed);
  if (placed)
    placed_sent_.fetch_add(1, std::memory_order_relaxed);
  if (bounce_lock.owns_lock()) // the bounce buffer is reused: finish this write first
    return wait(op) ? bounced : -1;
  return op;
}

bool connection::wait(int op) {
  if (op == bounced)
    return true;
  auto first = paired_[op];
  auto deadline = clock_type::now() + std::chrono::milliseconds(io_timeout_ms_);
  for (int spins = 0;; ++spins) {
    auto s = ops_[op].state.load(std::memory_order_acquire);
    if (s == tx_op::done || s < 0) {
      ops_[op].state.store(tx_op::idle);
      {
        std::lock_guard<std::mutex> guard{credit_mtx_};
        free_ops_.push_back(op);
      }
      auto ok = first < 0 || wait(first);
      if (s < 0) {
        fail(errc::io_error,
             fmt::format("an RMA write to the peer failed: {}", fi_error_text(s)));
        return false;
      }
      return ok;
    }
    core_->progress_tx();
    if (clock_type::now() >= deadline) { // the op stays pending: the connection stays
      fail(errc::timeout,                // in the endpoint's table until it completes
           fmt::format("an RMA write did not complete within {} ms", io_timeout_ms_));
      return false;
    }
    // A write completes in microseconds once the provider is driven: keep driving it
    // (yielding the core to others meanwhile) before napping.
    if (spins > 4096)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

bool connection::send(const protocol::frame_header& h, const iovec* payload, int count) {
  if (send_queue_bytes_ == 0) {
    auto op = post(h, payload, count);
    return op != -1 && wait(op);
  }
  int op = -1;
  {
    std::lock_guard<std::mutex> guard{post_mtx_};
    if (!is_open() || !bound_)
      return false;
    drain_queue();
    if (!queue_.empty() || !credit_free())
      return enqueue(h, payload, count);
    op = post(h, payload, count);
  }
  return op != -1 && wait(op);
}

bool connection::send_batch(const protocol::frame_header* headers, const iovec* payloads,
                            int n) {
  bool ok = true;
  auto mark = post_batch(headers, payloads, n, ok);
  return wait_sent(mark) && ok;
}

uint64_t connection::post_batch(const protocol::frame_header* headers,
                                const iovec* payloads, int n, bool& ok) {
  // Every write in flight at once, their completions reaped later: the window is the
  // peer's slots, not one frame. With a send queue, what finds no credit waits there
  // (copied: its caller's memory is free at once).
  ok = true;
  uint64_t mark = 0;
  std::unique_lock<std::mutex> lock{post_mtx_, std::defer_lock};
  if (send_queue_bytes_ > 0) {
    lock.lock();
    drain_queue();
  }
  for (int i = 0; i < n && ok; ++i) {
    int count = payloads[i].iov_len > 0 ? 1 : 0;
    if (send_queue_bytes_ > 0 && (!queue_.empty() || !credit_free())) {
      ok = enqueue(headers[i], &payloads[i], count);
      continue;
    }
    auto op = post(headers[i], &payloads[i], count);
    if (op == -1) {
      ok = false;
    } else if (op != bounced) {
      std::lock_guard<std::mutex> guard{inflight_mtx_};
      inflight_.emplace_back(op, ++marked_);
      mark = marked_;
    }
  }
  return mark;
}

void connection::reap() {
  std::lock_guard<std::mutex> guard{inflight_mtx_};
  while (!inflight_.empty() && try_finish(inflight_.front().first)) {
    reaped_.store(inflight_.front().second, std::memory_order_release);
    inflight_.pop_front();
  }
}

bool connection::wait_sent(uint64_t mark) {
  if (mark == 0)
    return true;
  auto deadline = clock_type::now() + std::chrono::milliseconds(io_timeout_ms_);
  for (int spins = 0;; ++spins) {
    reap();
    if (reaped_.load(std::memory_order_acquire) >= mark)
      return is_open();
    core_->progress_tx();
    if (clock_type::now() >= deadline) { // the ops stay pending: the connection stays
      fail(errc::timeout,                // in the endpoint's table until they complete
           fmt::format("an RMA write did not complete within {} ms", io_timeout_ms_));
      return false;
    }
    if (spins > 4096) // as in wait(): keep driving the provider, then nap
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

bool connection::credit_free() {
  std::lock_guard<std::mutex> guard{credit_mtx_};
  return !credits_.empty();
}

bool connection::enqueue(const protocol::frame_header& h, const iovec* payload,
                         int count) {
  size_t total = 0;
  for (int i = 0; i < count; ++i)
    total += payload[i].iov_len;
  if (queue_.empty())
    queue_moved_ = clock_type::now(); // the stall clock starts with the first frame
  if (queue_bytes_ + protocol::frame_header_bytes + total > send_queue_bytes_) {
    fail(errc::timeout,
         fmt::format(
           "the peer is not reading: {} bytes wait for its slots, and a {}-byte "
           "frame would pass the {} MiB bound (--send-queue-mib)",
           queue_bytes_, protocol::frame_header_bytes + total, send_queue_bytes_ >> 20));
    return false;
  }
  queued_frame f;
  f.h = h;
  f.payload.resize(total);
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    std::memcpy(f.payload.data() + at, payload[i].iov_base, payload[i].iov_len);
    at += payload[i].iov_len;
  }
  queue_bytes_ += protocol::frame_header_bytes + total;
  queued_now_.store(queue_bytes_, std::memory_order_relaxed);
  queue_.push_back(std::move(f));
  queued_frames_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool connection::try_finish(int op) {
  auto first = paired_[op];
  auto s = ops_[op].state.load(std::memory_order_acquire);
  if (s == tx_op::pending)
    return false;
  if (first >= 0 && ops_[first].state.load(std::memory_order_acquire) == tx_op::pending)
    return false;
  int failed = s < 0 ? s : 0;
  for (auto o : {op, first}) {
    if (o < 0)
      continue;
    auto st = ops_[o].state.load(std::memory_order_acquire);
    if (st < 0)
      failed = st;
    ops_[o].state.store(tx_op::idle);
    std::lock_guard<std::mutex> guard{credit_mtx_};
    free_ops_.push_back(o);
  }
  if (failed < 0)
    fail(errc::io_error,
         fmt::format("an RMA write to the peer failed: {}", fi_error_text(failed)));
  return true;
}

void connection::drain_queue() {
  // Copies whose writes completed are free.
  copies_.erase(std::remove_if(copies_.begin(), copies_.end(),
                               [&](auto& c) { return try_finish(c.first); }),
                copies_.end());
  while (!queue_.empty() && is_open() && credit_free()) {
    auto& f = queue_.front();
    iovec iov{f.payload.data(), f.payload.size()};
    auto op = post(f.h, &iov, f.payload.empty() ? 0 : 1);
    if (op == -1)
      return; // closed, with the reason
    queue_bytes_ -= protocol::frame_header_bytes + f.payload.size();
    queued_now_.store(queue_bytes_, std::memory_order_relaxed);
    queue_moved_ = clock_type::now();
    if (op != bounced) // the write reads the copy until it completes
      copies_.emplace_back(op, std::move(f.payload));
    queue_.pop_front();
  }
}

bool connection::flush_queue() {
  if (send_queue_bytes_ == 0)
    return false;
  std::unique_lock<std::mutex> lock{post_mtx_, std::try_to_lock};
  if (!lock.owns_lock())
    return true; // a sender posts meanwhile; the next round looks again
  drain_queue();
  if (!queue_.empty() && is_open()
      && clock_type::now() - queue_moved_ > std::chrono::milliseconds(io_timeout_ms_))
    fail(errc::timeout,
         fmt::format(
           "the peer gave no slot back for {} ms while {} bytes waited for one (all "
           "{} were in use: it stopped reading)",
           io_timeout_ms_, queue_bytes_, peer_slot_count_));
  if (!is_open()) {
    queue_.clear();
    queue_bytes_ = 0;
    queued_now_.store(0, std::memory_order_relaxed);
  }
  return !queue_.empty() || !copies_.empty();
}

uint64_t connection::queued_bytes() const {
  return queued_now_.load(std::memory_order_relaxed);
}

bool connection::idle() const noexcept {
  if (!ops_)
    return true;
  for (size_t i = 0; i < op_slot_.size(); ++i)
    if (ops_[i].state.load() == tx_op::pending)
      return false;
  return true;
}

bool connection::occupy(uint32_t s) noexcept {
  if (s >= slot_count_ || occupied_[s].exchange(true))
    return false;
  owed_.hold();
  return true;
}

bool connection::frame_at(uint32_t s, protocol::frame_header& h, std::string& why) const {
  if (decode(slots_->data() + size_t(s) * slot_bytes_, h, why) != errc::ok)
    return false;
  // Only an update may say its payload is elsewhere (written into an output buffer this
  // side named: placed_at checks it lies there); every other frame's payload is in its
  // slot, and the slot's size bounds it.
  const bool placed = (h.flags & protocol::flag_placed) != 0;
  if (placed && h.kind != protocol::frame_kind::update) {
    why = fmt::format("a {} frame flagged as placed (only an update's payload is written "
                      "elsewhere)",
                      to_string(h.kind));
    return false;
  }
  if (!placed && protocol::frame_header_bytes + size_t{h.payload_bytes} > slot_bytes_) {
    why = fmt::format("a {} frame says {} payload bytes; its slot holds {}",
                      to_string(h.kind), h.payload_bytes,
                      slot_bytes_ - protocol::frame_header_bytes);
    return false;
  }
  return true;
}

std::byte* connection::payload_at(uint32_t s) const noexcept {
  return slots_->data() + size_t(s) * slot_bytes_ + protocol::frame_header_bytes;
}

void connection::release(uint32_t s) noexcept {
  if (s >= slot_count_ || !occupied_[s].exchange(false))
    return; // not held: nothing owed (a second release of one slot gives back nothing)
  send_owed(owed_.release(static_cast<uint16_t>(s)));
}

void connection::hold() noexcept {
  owed_.hold();
}

void connection::unhold() noexcept {
  send_owed(owed_.unhold());
}

void connection::send_owed(const owed_credits::batch& due) noexcept {
  if (due.n == 0 || !is_open() || !bound_)
    return; // nothing due, or closing: the peer's slots go with it
  // Never more than batch_at() slots, which one message to this peer holds (bind).
  if (!core_->send_credits(peer_addr_, peer_index_, due.slots.data(), due.n,
                           io_timeout_ms_)) {
    fail(errc::io_error,
         "could not give a slot back to the peer (its endpoint is gone?)");
    return;
  }
  credit_messages_.fetch_add(1, std::memory_order_relaxed);
  credits_given_.fetch_add(due.n, std::memory_order_relaxed);
}

} // namespace rw::transports::fabric
