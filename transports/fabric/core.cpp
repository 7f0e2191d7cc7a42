#include "transports/fabric/core.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "rackweave/errc.hpp"

namespace rw::transports::fabric {

namespace {
constexpr size_t posted_receives = 512; // credit messages in flight towards this side
constexpr size_t receive_bytes = credit_receive_bytes;
constexpr size_t cq_entries = 8192;

void check(long rc, const char* what, const domain& d) {
  if (rc != 0)
    throw rw::error(errc::unavailable, fmt::format("fabric: {} on provider {}: {}", what,
                                                   d.provider_name(), fi_error_text(rc)));
}
} // namespace

static_assert(sizeof(fi_context2) <= sizeof(tx_op::context), "tx_op too small");

std::shared_ptr<registration_cache> core::make_send_cache(std::shared_ptr<domain> d) {
  return std::make_shared<registration_cache>(std::move(d), FI_SEND | FI_WRITE);
}

core::core(std::shared_ptr<domain> d, std::shared_ptr<registration_cache> sends)
  : dom(d), send_memory(sends ? std::move(sends) : make_send_cache(d)),
    target_memory(std::make_shared<registration_cache>(d, FI_REMOTE_WRITE, 4096, 4096)),
    recv_ctx_(posted_receives) {
  check(fi_endpoint(dom->handle(), dom->info(), &ep, nullptr), "opening an endpoint",
        *dom);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  check(fi_av_open(dom->handle(), &av_attr, &av, nullptr), "opening an address vector",
        *dom);
  fi_cq_attr cq{};
  cq.format = FI_CQ_FORMAT_DATA;
  cq.size = cq_entries;
  cq.wait_obj = FI_WAIT_UNSPEC;
  if (fi_cq_open(dom->handle(), &cq, &rx_cq, nullptr) == 0) {
    rx_waitable = true;
  } else {
    cq.wait_obj = FI_WAIT_NONE; // the poller naps instead of sleeping on the queue
    check(fi_cq_open(dom->handle(), &cq, &rx_cq, nullptr), "opening a completion queue",
          *dom);
  }
  fi_cq_attr tx{};
  tx.format = FI_CQ_FORMAT_CONTEXT;
  tx.size = cq_entries;
  tx.wait_obj = FI_WAIT_NONE;
  check(fi_cq_open(dom->handle(), &tx, &tx_cq, nullptr), "opening a completion queue",
        *dom);
  check(fi_ep_bind(ep, &av->fid, 0), "binding the address vector", *dom);
  check(fi_ep_bind(ep, &tx_cq->fid, FI_TRANSMIT), "binding the transmit queue", *dom);
  check(fi_ep_bind(ep, &rx_cq->fid, FI_RECV), "binding the receive queue", *dom);
  check(fi_enable(ep), "enabling the endpoint", *dom);
  recv_bufs_.resize(posted_receives * receive_bytes);
  recv_region_ = std::make_unique<region>(*dom, recv_bufs_.data(), recv_bufs_.size(),
                                          FI_RECV);
  for (size_t i = 0; i < posted_receives; ++i)
    repost(i);
  credits_per_message_ = static_cast<uint32_t>(
    std::min<size_t>(credit_batch_accepted, 1 + dom->inject_size() / 2));
}

core::~core() {
  if (ep)
    fi_close(&ep->fid);
  if (rx_cq)
    fi_close(&rx_cq->fid);
  if (tx_cq)
    fi_close(&tx_cq->fid);
  if (av)
    fi_close(&av->fid);
}

std::vector<std::byte> core::address() const {
  size_t len = 0;
  fi_getname(&ep->fid, nullptr, &len);
  std::vector<std::byte> out(len);
  check(fi_getname(&ep->fid, out.data(), &len), "reading the endpoint's address", *dom);
  out.resize(len);
  return out;
}

void core::repost(size_t i) noexcept {
  auto* ctx = &recv_ctx_[i];
  for (int tries = 0; tries < 10000; ++tries) {
    auto rc = fi_recv(ep, recv_bufs_.data() + i * receive_bytes, receive_bytes,
                      recv_region_->desc(), FI_ADDR_UNSPEC, ctx->context);
    if (rc != -FI_EAGAIN)
      return;
    progress_tx();
  }
}

const std::byte* core::receive_buffer(size_t i) const noexcept {
  return recv_bufs_.data() + i * receive_bytes;
}

size_t core::receive_of(void* context) const noexcept {
  auto* p = static_cast<const std::byte*>(context);
  auto* first = reinterpret_cast<const std::byte*>(recv_ctx_.data());
  if (p < first || p >= first + recv_ctx_.size() * sizeof(tx_op))
    return SIZE_MAX;
  return static_cast<size_t>(p - first) / sizeof(tx_op);
}

void core::progress_tx() noexcept {
  std::unique_lock<std::mutex> lock{tx_mtx_, std::try_to_lock};
  if (!lock.owns_lock())
    return;
  fi_cq_entry entries[64];
  for (int round = 0; round < 64; ++round) {
    auto n = fi_cq_read(tx_cq, entries, 64);
    if (n > 0) {
      for (long i = 0; i < n; ++i)
        if (entries[i].op_context)
          static_cast<tx_op*>(entries[i].op_context)->state.store(tx_op::done);
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(tx_cq, &err, 0) > 0 && err.op_context)
        static_cast<tx_op*>(err.op_context)
          ->state.store(err.err > 0 ? -static_cast<int>(err.err) : -FI_EIO);
      continue;
    }
    break;
  }
}

bool core::send_credits(uint64_t dest, uint32_t peer_index, const uint16_t* slots,
                        size_t n, int timeout_ms) noexcept {
  if (n == 0 || n > credits_per_message_)
    return false;
  unsigned char more[2 * (credit_batch_accepted - 1)];
  for (size_t i = 1; i < n; ++i) { // little-endian, whatever this host is
    more[2 * (i - 1)] = static_cast<unsigned char>(slots[i] & 0xff);
    more[2 * (i - 1) + 1] = static_cast<unsigned char>(slots[i] >> 8);
  }
  return inject(n > 1 ? more : nullptr, 2 * (n - 1), immediate(peer_index, slots[0]),
                dest, timeout_ms);
}

bool core::send_notice(uint64_t dest, uint32_t imm, int timeout_ms) noexcept {
  return inject(nullptr, 0, imm, dest, timeout_ms);
}

bool core::inject(const void* bytes, size_t n, uint32_t imm, uint64_t dest,
                  int timeout_ms) noexcept {
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds(timeout_ms);
  while (true) {
    auto rc = fi_injectdata(ep, bytes, n, imm, dest);
    if (rc == 0)
      return true;
    if (rc != -FI_EAGAIN || std::chrono::steady_clock::now() > deadline)
      return false;
    progress_tx();
    std::this_thread::yield();
  }
}

uint32_t core::add(std::shared_ptr<connection> c) {
  std::lock_guard<std::mutex> guard{table_mtx};
  for (uint32_t n = 0; n < max_connections; ++n) {
    auto i = (next_index_ + n) % max_connections;
    if (i >= conns.size())
      conns.resize(i + 1);
    if (!conns[i]) {
      conns[i] = std::move(c);
      next_index_ = i + 1;
      return i;
    }
  }
  throw rw::error(
    errc::unavailable,
    fmt::format("fabric: this endpoint has {} connections, its limit", max_connections));
}

std::shared_ptr<connection> core::find(uint32_t index) {
  std::lock_guard<std::mutex> guard{table_mtx};
  return index < conns.size() ? conns[index] : nullptr;
}

} // namespace rw::transports::fabric
