#pragma once
// Two fabric endpoints over libfabric's tcp provider on 127.0.0.1, each with one
// connection to the other, both polled by one thread all along (pair_fixture); a
// recorder sink that can hold resident frames (their slots not given back); and a
// misbehaving third peer that writes and sends what it likes into the pair (rogue_peer).
// For the fabric unit tests (test_fabric.cpp, test_fabric_credits.cpp).

#include <catch2/catch.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "transports/fabric/endpoint.hpp"

namespace rw_test::fabric_pair {

using namespace rw;
using namespace rw::protocol;
using namespace rw::transports;

struct recorder final : frame_sink {
  std::mutex mtx; // the pump thread records, the test reads
  std::vector<frame_header> headers;
  std::vector<std::vector<float>> payloads;
  std::vector<runtime::buffer_ref> held; // resident frames kept (slots not given back)
  bool keep = false;
  std::vector<std::string> closed;
  std::vector<float> target;
  // Where updates go when set (as a worker's output buffer), chunk c at c * chunk_bytes.
  std::byte* results = nullptr;
  uint32_t chunk_bytes = 0;
  uint64_t copies_skipped = 0; // targets the payload was already in

  payload_target on_header(const connection_ptr&, const frame_header& h) override {
    std::lock_guard<std::mutex> guard{mtx};
    if (results != nullptr && h.kind == frame_kind::update
        && (h.flags & flag_subscribe) == 0)
      return payload_target::into(results + uint64_t{h.chunk_index} * chunk_bytes);
    target.assign(h.payload_bytes / sizeof(float), 0);
    return payload_target::into(reinterpret_cast<std::byte*>(target.data()));
  }
  void on_frame(const connection_ptr&, const frame_header& h,
                payload_target& t) override {
    std::lock_guard<std::mutex> guard{mtx};
    headers.push_back(h);
    auto* f = reinterpret_cast<const float*>(t.dst);
    payloads.emplace_back(f, f + h.payload_bytes / sizeof(float));
  }
  void on_closed(const connection_ptr&, errc, const std::string& why) override {
    std::lock_guard<std::mutex> guard{mtx};
    closed.push_back(why);
  }
  void on_resident_frame(const connection_ptr&, const frame_header& h,
                         runtime::buffer_ref p) override {
    std::lock_guard<std::mutex> guard{mtx};
    headers.push_back(h);
    std::vector<float> v;
    if (p)
      v.assign(p->floats(), p->floats() + p->size / sizeof(float));
    payloads.push_back(v);
    if (keep && p)
      held.push_back(std::move(p));
  }
};

struct pair_fixture {
  std::shared_ptr<fabric::endpoint> a, b;
  std::shared_ptr<fabric::connection> ab, ba;
  recorder ra, rb;

  /// `a_queue`: the send queue bound of a's connections (0: a's sends wait for credit).
  explicit pair_fixture(uint32_t slots = 8,
                        fabric::placement placing = fabric::placement::scatter,
                        uint64_t a_queue = 0) {
    auto d = fabric::domain::open("tcp", "127.0.0.1");
    fabric::endpoint_settings s;
    s.slots = slots;
    s.pool_bytes = 4u << 20;
    s.max_placement = placing;
    s.io_timeout_ms = 2000;
    auto sa = s;
    sa.send_queue_bytes = a_queue;
    a = std::make_shared<fabric::endpoint>(d, sa);
    b = std::make_shared<fabric::endpoint>(fabric::domain::open("tcp", "127.0.0.1"), s);
    ab = a->open("b", 4096);
    ba = b->open("a", 4096);
    ab->bind(ba->offer());
    ba->bind(ab->offer());
    a->adopt(ab);
    b->adopt(ba);
    // Both endpoints are polled all along, as a NIC poller and a worker's receiver do:
    // the provider makes progress (connection setup included) only when polled.
    pumper = std::thread([this] {
      while (!stop) {
        a->poll(1, ra);
        b->poll(1, rb);
        std::lock_guard<std::mutex> guard{rogue_mtx};
        if (rogue != nullptr)
          rogue->progress_tx();
      }
    });
  }
  ~pair_fixture() {
    stop = true;
    pumper.join();
  }
  // Waits until `done` (checked with both recorders locked) or 5 s.
  template <class Pred>
  bool pump(Pred done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      {
        std::scoped_lock lock{ra.mtx, rb.mtx};
        if (done())
          return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::scoped_lock lock{ra.mtx, rb.mtx};
    return done();
  }
  std::atomic<bool> stop{false};
  std::mutex rogue_mtx;
  fabric::core* rogue = nullptr; // a misbehaving third peer, progressed too
  std::thread pumper;
};

// A misbehaving third peer: its own endpoint, writing 64 bytes of `fill` (or a header)
// into slots at b and sending what frame notices and credit messages it likes. It lives
// (and is progressed) as long as the pair.
//  - as::stranger: no connection of b has it as its peer; it writes with the key of
//    ba's window, as if it had learnt it (`offer` is ba's).
//  - as::peer: b's peer on a connection of its own (`conn`, adopted by b), with a window
//    of its own that b writes into; `offer` is what b offered it.
struct rogue_peer {
  enum class as { stranger, peer };
  static constexpr uint32_t window_slots = 8;

  explicit rogue_peer(pair_fixture& f, as role = as::stranger)
    : dom(fabric::domain::open("tcp", "127.0.0.1")), core(dom), junk(128),
      mem(*dom, junk.data(), junk.size(), FI_WRITE),
      window(window_slots * fabric::slot_bytes_for(4096)),
      window_mem(*dom, window.data(), window.size(), FI_REMOTE_WRITE), f_(f) {
    if (role == as::peer) {
      protocol::fabric_offer mine;
      mine.provider = dom->provider();
      mine.address = core.address();
      mine.slots_address = window_mem.remote_address(window.data());
      mine.slots_key = window_mem.key();
      mine.slot_bytes = static_cast<uint32_t>(fabric::slot_bytes_for(4096));
      mine.slot_count = window_slots;
      mine.credit_batch = 1;
      mine.frame_notices = true;
      conn = f.b->open("rogue", 4096);
      conn->bind(mine);
      f.b->adopt(conn);
      offer = conn->offer();
    } else {
      offer = f.ba->offer();
    }
    REQUIRE(fi_av_insert(core.av, offer.address.data(), 1, &dest, 0, nullptr) == 1);
    std::lock_guard<std::mutex> guard{f.rogue_mtx};
    f.rogue = &core;
  }
  ~rogue_peer() {
    std::lock_guard<std::mutex> guard{f_.rogue_mtx};
    f_.rogue = nullptr;
  }
  // Writes 64 bytes of `fill` into `slot` of offer's window, then sends notice `imm`.
  long write(std::byte fill, uint32_t imm, uint32_t slot) {
    std::fill(junk.begin(), junk.end(), fill);
    return post(imm, slot);
  }
  // Writes a well-formed header `h` (no payload), then sends notice `imm`.
  long write(const frame_header& h, uint32_t imm, uint32_t slot) {
    encode(h, junk.data());
    return post(imm, slot);
  }
  // Sends a credit message to b with immediate `imm` and `bytes` of payload from junk.
  long credit(uint32_t imm, size_t bytes) {
    long rc = -FI_EAGAIN;
    for (int i = 0; i < 5000 && rc == -FI_EAGAIN; ++i) {
      rc = fi_injectdata(core.ep, bytes ? junk.data() : nullptr, bytes, imm, dest);
      if (rc == -FI_EAGAIN)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return rc;
  }
  // Writes junk's first 64 bytes to `address` under `key`, with immediate `imm` riding
  // on the write itself when `with_imm`; waits up to 5 s for the write's completion and
  // returns it (0, or the provider's negative error).
  long write_to(uint64_t address, uint64_t key, bool with_imm = false, uint32_t imm = 0) {
    op.state.store(fabric::tx_op::pending);
    long rc = -FI_EAGAIN;
    for (int i = 0; i < 5000 && rc == -FI_EAGAIN; ++i) {
      rc = with_imm ? fi_writedata(core.ep, junk.data(), 64, mem.desc(), imm, dest,
                                   address, key, op.context)
                    : fi_write(core.ep, junk.data(), 64, mem.desc(), dest, address, key,
                               op.context);
      if (rc == -FI_EAGAIN)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != 0)
      return rc;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (op.state.load() == fabric::tx_op::pending
           && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto s = op.state.load();
    return s == fabric::tx_op::done ? 0 : s == fabric::tx_op::pending ? -FI_ETIMEDOUT : s;
  }
  long post(uint32_t imm, uint32_t slot) {
    auto rc = write_to(offer.slots_address + uint64_t(slot) * offer.slot_bytes,
                       offer.slots_key);
    return rc != 0 ? rc : credit(imm, 0); // the notice: a message like a credit's
  }

  std::shared_ptr<fabric::domain> dom;
  fabric::core core;
  std::vector<std::byte> junk;
  fabric::region mem;
  std::vector<std::byte> window; // as::peer: the slots b writes into
  fabric::region window_mem;
  fabric::tx_op op;
  fi_addr_t dest = FI_ADDR_UNSPEC;
  protocol::fabric_offer offer;
  std::shared_ptr<fabric::connection> conn; // as::peer: b's connection to it

private:
  pair_fixture& f_;
};

inline frame_header push_of(uint32_t chunk, uint32_t bytes) {
  frame_header h;
  h.kind = frame_kind::push;
  h.job_id = 7;
  h.rank = 1;
  h.chunk_index = chunk;
  h.clock = 3;
  h.payload_bytes = bytes;
  return h;
}

} // namespace rw_test::fabric_pair
