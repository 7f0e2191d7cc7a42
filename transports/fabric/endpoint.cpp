#include "transports/fabric/endpoint.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rw::transports::fabric {

namespace {
constexpr int entries_per_read = 64;
constexpr int max_entries_per_poll = 4096; // then the poller looks at its mailbox
constexpr auto bad_imm_log_every = std::chrono::seconds(10);
constexpr uint32_t min_slots = 4; // per connection, however large its chunks

/// A frame in a receive slot, lent to the sink; the slot goes back to the peer when
/// the last reference is gone.
class slot_view final : public runtime::payload {
public:
  slot_view(std::shared_ptr<connection> c, uint32_t slot, uint32_t bytes)
    : payload(c->payload_at(slot), bytes, true), conn_(std::move(c)), slot_(slot) {
    size = bytes;
  }

private:
  void recycle() noexcept override {
    conn_->release(slot_);
    delete this;
  }
  std::shared_ptr<connection> conn_;
  uint32_t slot_;
};

/// A placed update's payload, in the receiver's own output buffer: nothing to give back.
class placed_view final : public runtime::payload {
public:
  placed_view(std::byte* at, uint32_t bytes) : payload(at, bytes, true) { size = bytes; }

private:
  void recycle() noexcept override { delete this; }
};

bool resident(protocol::frame_kind k) {
  return k == protocol::frame_kind::push || k == protocol::frame_kind::init
         || k == protocol::frame_kind::pull;
}
} // namespace

uint64_t slot_bytes_for(uint32_t max_payload) {
  return (uint64_t{protocol::frame_header_bytes} + std::max<uint32_t>(max_payload, 4096)
          + 63)
         / 64 * 64;
}

namespace {
uint32_t wanted_slots(const endpoint_settings& s, uint64_t slot_bytes) {
  return static_cast<uint32_t>(
    std::clamp<uint64_t>(s.max_bytes_per_connection / slot_bytes,
                         std::min<uint32_t>(min_slots, s.slots), s.slots));
}
} // namespace

uint64_t pool_for_one(const endpoint_settings& s, uint32_t max_payload) {
  auto bytes = slot_bytes_for(max_payload);
  return bytes * wanted_slots(s, bytes);
}

endpoint::endpoint(std::shared_ptr<domain> d, endpoint_settings s)
  : core_(std::make_shared<core>(std::move(d), s.send_memory)), settings_(s) {
  settings_.slots = std::clamp<uint32_t>(settings_.slots, 1, max_slots);
  core_->place_mode = std::min(core_->dom->placement(), settings_.max_placement);
  pool_ = slot_pool::make(core_->dom, settings_.pool_bytes, settings_.numa, true);
}

endpoint::endpoint(std::shared_ptr<domain> d, endpoint_settings s, uint32_t max_payload)
  : core_(std::make_shared<core>(std::move(d), s.send_memory)), settings_(s) {
  settings_.slots = std::clamp<uint32_t>(settings_.slots, 1, max_slots);
  settings_.pool_bytes = pool_for_one(settings_, max_payload);
  core_->place_mode = std::min(core_->dom->placement(), settings_.max_placement);
  pool_ = slot_pool::make(core_->dom, settings_.pool_bytes, settings_.numa, false);
}

std::shared_ptr<void> endpoint::pin(const void* p, size_t n) {
  struct both {
    std::shared_ptr<void> sends, results;
  };
  auto held = std::make_shared<both>();
  held->sends = core_->send_memory->pin(p, n);
  if (core_->place_mode != placement::off)
    held->results = core_->target_memory->pin(p, n);
  return held;
}

endpoint::~endpoint() {
  if (auto n = placed_.load(); n > 0)
    spdlog::debug(
      "fabric: {} closed; {} updates arrived straight in their output buffers "
      "(placement {})",
      describe(), n, to_string(core_->place_mode));
  std::vector<std::shared_ptr<connection>> conns;
  {
    std::lock_guard<std::mutex> guard{core_->table_mtx};
    conns.swap(core_->conns); // connections point back at the core: break the cycle
  }
  for (auto& c : conns)
    if (c)
      c->close();
}

std::shared_ptr<connection> endpoint::open(const std::string& peer,
                                           uint32_t max_payload) {
  auto bytes = slot_bytes_for(max_payload);
  if (bytes > UINT32_MAX)
    throw rw::error(
      errc::frame_too_large,
      fmt::format("fabric: {} payload bytes per frame is too many", max_payload));
  auto want = wanted_slots(settings_, bytes);
  auto window = pool_->lend(bytes, std::min(want, min_slots), want);
  auto c = std::make_shared<connection>(core_, peer, static_cast<uint32_t>(bytes),
                                        std::move(window), settings_.io_timeout_ms,
                                        settings_.send_queue_bytes);
  c->index_ = core_->add(c);
  return c;
}

void endpoint::adopt(connection_ptr c) {
  auto f = std::dynamic_pointer_cast<connection>(c);
  if (!f)
    throw std::logic_error("the fabric endpoint adopts fabric connections only");
  std::lock_guard<std::mutex> guard{incoming_mtx_};
  incoming_.push_back(std::move(f));
  if (core_->rx_waitable)
    fi_cq_signal(core_->rx_cq);
}

size_t endpoint::connection_count() const noexcept {
  return live_.load();
}

std::string endpoint::describe() const {
  auto& d = *core_->dom;
  auto name = fmt::format("fabric://{}/{}", d.provider_name(),
                          d.info()->domain_attr->name ? d.info()->domain_attr->name
                                                      : "?");
  if (settings_.per_nic > 1)
    name += fmt::format("#{}", settings_.index);
  return name;
}

void endpoint::deliver(const std::shared_ptr<connection>& c, uint32_t slot,
                       frame_sink& sink) {
  if (!c->is_open())
    return; // closing: its frames are dropped with it
  if (!c->occupy(slot)) {
    c->fail(errc::bad_frame,
            fmt::format("the peer wrote into slot {} while it still held a frame (it "
                        "overran its credits)",
                        slot));
    return;
  }
  protocol::frame_header h;
  std::string why;
  if (!c->frame_at(slot, h, why)) {
    // No error frame: sending one would wait on this very thread's progress. The
    // sink hears the close with the reason (a node closes the worker's TCP link too).
    spdlog::warn("fabric: peer={}: a frame that cannot be trusted: {}; closing",
                 c->peer(), why);
    c->fail(errc::bad_frame, why);
    return;
  }
  if (h.kind == protocol::frame_kind::place || (h.flags & protocol::flag_placed) != 0) {
    // The transport's own: where the peer wants results, or an update already there.
    if (h.kind == protocol::frame_kind::place) {
      protocol::fabric_place p;
      if (decode(c->payload_at(slot), h.payload_bytes, p, why) == errc::ok
          && c->set_place(p, why)) {
        c->release(slot);
        return;
      }
    } else if (auto* at = c->placed_at(h, why)) {
      h.flags &= static_cast<uint16_t>(~protocol::flag_placed);
      placed_.fetch_add(1, std::memory_order_relaxed);
      sink.frame_sink::on_resident_frame(
        c, h, runtime::buffer_ref{new placed_view(at, h.payload_bytes)});
      c->release(slot);
      return;
    }
    spdlog::warn("fabric: peer={}: {}; closing", c->peer(), why);
    c->fail(errc::bad_frame, why);
    return;
  }
  runtime::buffer_ref view;
  if (h.payload_bytes > 0)
    view.reset(new slot_view(c, slot, h.payload_bytes));
  if (resident(h.kind))
    sink.on_resident_frame(c, h, std::move(view));
  else
    sink.frame_sink::on_resident_frame(c, h, std::move(view)); // copied where it goes
  if (h.payload_bytes == 0)
    c->release(slot);
}

void endpoint::on_write(uint64_t imm, uint64_t src, frame_sink& sink) {
  auto index = imm_connection(imm);
  auto slot = imm_slot(imm);
  auto c = core_->find(index);
  if (!c || slot >= c->slot_count()) {
    dropped(fmt::format("a frame notice {:#010x} names no slot (connection {} slot "
                        "{}{})",
                        imm, index, slot,
                        c ? fmt::format(" of {}", c->slot_count()) : " unknown"));
    return;
  }
  if (!c->sent_by(src)) {
    dropped(
      fmt::format("a frame notice naming slot {} of connection {} ({}) came from {}, not "
                  "from that connection's peer",
                  slot, index, c->peer(), source_name(src)));
    return;
  }
  if (!c->adopted) {
    c->held.push_back(slot);
    return;
  }
  if (round_ && !c->in_round) {
    c->in_round = true;
    c->hold();
    round_->push_back(c);
  }
  deliver(c, slot, sink);
}

void endpoint::on_credit(uint64_t imm, uint64_t src, const std::byte* more,
                         size_t bytes) {
  auto c = core_->find(imm_connection(imm));
  if (!c)
    return; // a credit for a connection already gone
  if (!c->sent_by(src)) {
    dropped(fmt::format("a credit message naming connection {} ({}) came from {}, not "
                        "from that connection's peer",
                        imm_connection(imm), c->peer(), source_name(src)));
    return;
  }
  uint16_t slots[credit_batch_accepted];
  slots[0] = static_cast<uint16_t>(imm_slot(imm));
  if (bytes % 2 != 0 || bytes / 2 + 1 > credit_batch_accepted || (bytes > 0 && !more)) {
    c->fail(
      errc::bad_frame,
      fmt::format("a credit message of {} payload bytes (an even count, at most {})",
                  bytes, 2 * (credit_batch_accepted - 1)));
    return;
  }
  const size_t n = 1 + bytes / 2;
  for (size_t i = 1; i < n; ++i)
    slots[i] = static_cast<uint16_t>(std::to_integer<uint16_t>(more[2 * (i - 1)])
                                     | std::to_integer<uint16_t>(more[2 * i - 1]) << 8);
  if (!c->credit(slots, n)) {
    std::string listed;
    for (size_t i = 0; i < n; ++i)
      listed += fmt::format("{}{}", i ? " " : "", slots[i]);
    c->fail(
      errc::bad_frame,
      fmt::format("the peer gave back a slot it had not been sent (slots {})", listed));
  } else if (c->queued_bytes() > 0) {
    c->flush_queue(); // frames waited for these credits
  }
}

void endpoint::dropped(const std::string& what) {
  auto n = bad_imm_.fetch_add(1) + 1;
  auto now = std::chrono::steady_clock::now();
  if (n == 1 || now - bad_imm_logged_ > bad_imm_log_every) { // the endpoint's thread only
    bad_imm_logged_ = now;
    spdlog::warn("fabric: {}: ignored; {} such messages so far", what, n);
  }
}

std::string endpoint::source_name(uint64_t src) const {
  if (src == FI_ADDR_NOTAVAIL)
    return "an address no connection of this endpoint has";
  return fmt::format("connection address {}", src);
}

void endpoint::flush_queues() {
  if (settings_.send_queue_bytes == 0)
    return;
  auto now = std::chrono::steady_clock::now();
  if (now < next_flush_)
    return;
  next_flush_ = now + std::chrono::milliseconds(10);
  std::vector<std::shared_ptr<connection>> open;
  {
    std::lock_guard<std::mutex> guard{core_->table_mtx};
    for (auto& c : core_->conns)
      if (c && c->is_open())
        open.push_back(c);
  }
  for (auto& c : open)
    c->flush_queue();
}

int endpoint::drain(int timeout_ms, frame_sink& sink) {
  fi_cq_data_entry e[entries_per_read];
  fi_addr_t src[entries_per_read]; // FI_SOURCE: who wrote or sent each one
  int handled = 0;
  bool waited = false;
  while (handled < max_entries_per_poll) {
    auto n = fi_cq_readfrom(core_->rx_cq, e, entries_per_read, src);
    if (n == -FI_EAGAIN && handled == 0 && !waited && timeout_ms > 0) {
      waited = true;
      if (core_->rx_waitable) {
        n = fi_cq_sreadfrom(core_->rx_cq, e, entries_per_read, src, nullptr, timeout_ms);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 2)));
        continue;
      }
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(core_->rx_cq, &err, 0) > 0) {
        // A peer decides how often this happens (a message longer than a credit
        // message's receive buffer is truncated): counted, logged at most once a while.
        auto failed = failed_rx_.fetch_add(1) + 1;
        auto now = std::chrono::steady_clock::now();
        if (failed == 1 || now - failed_rx_logged_ > bad_imm_log_every) {
          failed_rx_logged_ = now;
          spdlog::warn("fabric: a receive failed: {} (a credit message is at most {} "
                       "bytes); dropped; {} such receives so far",
                       fi_error_text(-static_cast<long>(err.err)), credit_receive_bytes,
                       failed);
        }
        auto i = core_->receive_of(err.op_context);
        if (i != SIZE_MAX)
          core_->repost(i);
      }
      continue;
    }
    if (n <= 0)
      break;
    round_holder round{*this}; // credits owed during these completions go in batches
    for (long i = 0; i < n; ++i) {
      auto& x = e[i];
      auto posted = core_->receive_of(x.op_context);
      if (x.flags & FI_REMOTE_WRITE) {
        if (posted != SIZE_MAX) // FI_RX_CQ_DATA: the immediate took a posted receive
          core_->repost(posted);
        if (x.flags & FI_REMOTE_CQ_DATA) // frames are announced by message (core.hpp)
          dropped(fmt::format("a write carried immediate {:#010x}; frames are announced "
                              "by a notice message",
                              x.data));
      } else if (x.flags & FI_RECV) {
        if (!(x.flags & FI_REMOTE_CQ_DATA)) {
          dropped(fmt::format("a {}-byte message carried no immediate", x.len));
        } else if (is_frame_notice(x.data)) {
          if (posted != SIZE_MAX) {
            core_->repost(posted);
            posted = SIZE_MAX;
          }
          on_write(x.data, src[i], sink);
        } else {
          on_credit(x.data, src[i],
                    posted != SIZE_MAX ? core_->receive_buffer(posted) : nullptr, x.len);
        }
        if (posted != SIZE_MAX)
          core_->repost(posted);
      }
      ++handled;
    }
  }
  return handled;
}

void endpoint::sweep(frame_sink& sink) {
  auto epoch = core_->closed_epoch.load();
  if (epoch == swept_epoch_ && !pending_removal_)
    return;
  swept_epoch_ = epoch;
  pending_removal_ = false;
  std::vector<std::shared_ptr<connection>> closed;
  {
    std::lock_guard<std::mutex> guard{core_->table_mtx};
    for (auto& c : core_->conns)
      if (c && !c->is_open())
        closed.push_back(c);
  }
  for (auto& c : closed) {
    if (c->adopted && !c->reported) {
      c->reported = true;
      live_.fetch_sub(1);
      sink.on_closed(c, c->close_code(), c->close_reason());
    }
    if (!c->idle()) { // a write still in flight points into it: keep it a while
      pending_removal_ = true;
      continue;
    }
    std::lock_guard<std::mutex> guard{core_->table_mtx};
    if (c->index() < core_->conns.size() && core_->conns[c->index()] == c)
      core_->conns[c->index()].reset();
  }
}

int endpoint::poll(int timeout_ms, frame_sink& sink) {
  std::vector<std::shared_ptr<connection>> fresh;
  {
    std::lock_guard<std::mutex> guard{incoming_mtx_};
    fresh.swap(incoming_);
  }
  int handled = 0;
  for (auto& c : fresh) {
    c->adopted = true;
    live_.fetch_add(1);
    for (auto slot : c->held) {
      deliver(c, slot, sink);
      ++handled;
    }
    c->held.clear();
  }
  handled += drain(handled > 0 ? 0 : timeout_ms, sink);
  core_->progress_tx();
  flush_queues();
  sweep(sink);
  return handled;
}

void endpoint::close_all(frame_sink& sink) {
  {
    std::lock_guard<std::mutex> guard{incoming_mtx_};
    for (auto& c : incoming_) {
      c->adopted = true;
      live_.fetch_add(1);
    }
    incoming_.clear();
  }
  std::vector<std::shared_ptr<connection>> conns;
  {
    std::lock_guard<std::mutex> guard{core_->table_mtx};
    conns.swap(core_->conns);
  }
  for (auto& c : conns) {
    if (!c)
      continue;
    c->fail(errc::io_error, "endpoint shut down");
    if (c->adopted && !c->reported) {
      c->reported = true;
      live_.fetch_sub(1);
      sink.on_closed(c, errc::io_error, "endpoint shut down");
    }
  }
}

} // namespace rw::transports::fabric
