// Shared memory segments: their format, checks and rings (no node needed).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transports/shm/connection.hpp"
#include "transports/shm/segment.hpp"

namespace rw_unit_shm {

using namespace rw::transports::shm;

namespace {

rw::job_spec spec_of(uint64_t elements) {
  rw::job_spec s;
  s.name = "shm";
  s.chunk_bytes = 4096;
  s.tensors = {{"a", elements, false}, {"b", 7, false}};
  return s;
}

} // namespace

TEST_CASE("a worker segment opens only for its nonce and its job spec", "[shm]") {
  auto spec = spec_of(5000);
  auto mine = create_worker_segment(spec, 42);
  CHECK_NOTHROW(open_worker_segment(mine.name(), 42, spec));
  CHECK_THROWS_WITH(open_worker_segment(mine.name(), 43, spec),
                    Catch::Contains("not the one"));
  CHECK_THROWS_WITH(open_worker_segment(mine.name(), 42, spec_of(5001)),
                    Catch::Contains("does not match"));
  CHECK_THROWS_WITH(open_worker_segment("/etc-passwd", 42, spec),
                    Catch::Contains("is not sealed shared memory"));
  CHECK_THROWS_WITH(open_worker_segment("/proc/1/fd/3/../../environ", 42, spec),
                    Catch::Contains("is not sealed shared memory"));
  auto opened = open_worker_segment(mine.name(), 42, spec);
  // Both mappings see the same memory, regions cache- and page-aligned.
  auto* table = tensor_table(opened.as<header>());
  CHECK(table[0].grad_offset % region_align == 0);
  CHECK(table[1].result_offset + 7 * 4 <= opened.size());
  reinterpret_cast<float*>(mine.data() + table[1].grad_offset)[6] = 3.5f;
  CHECK(reinterpret_cast<float*>(opened.data() + table[1].grad_offset)[6] == 3.5f);
}

// Issue 59, finding 4: a worker that truncated its segment after the welcome killed the
// node (SIGBUS in the shm poller). Its segment is sealed memory now, and the node maps
// nothing else.
TEST_CASE(
  "a worker's segment cannot shrink under the node, and unsealed memory is refused",
  "[shm]") {
  auto spec = spec_of(5000);
  auto mine = create_worker_segment(spec, 42);
  CHECK(mine.name().rfind("/proc/", 0) == 0);
  auto opened = open_worker_segment(mine.name(), 42, spec);
  // The worker (any process of its user, by that name) cannot take pages away.
  int fd = ::open(mine.name().c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(::ftruncate(fd, 0) != 0);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, static_cast<off_t>(mine.size() * 2)) != 0);
  ::close(fd);
  // Every page still there: reading the last one is no SIGBUS.
  CHECK(std::to_integer<int>(opened.data()[opened.size() - 1]) == 0);

  // The same bytes in memory that is not sealed: refused, saying why.
  int loose = memfd_create("loose", MFD_CLOEXEC);
  REQUIRE(loose >= 0);
  REQUIRE(::ftruncate(loose, static_cast<off_t>(mine.size())) == 0);
  REQUIRE(::pwrite(loose, mine.data(), mine.size(), 0)
          == static_cast<ssize_t>(mine.size()));
  auto loose_name = "/proc/" + std::to_string(::getpid()) + "/fd/"
                    + std::to_string(loose);
  CHECK_THROWS_WITH(open_worker_segment(loose_name, 42, spec),
                    Catch::Contains("not sealed against shrinking"));
  ::close(loose);
  // A segment by name in /dev/shm, as workers made them before: refused.
  auto old = "/rackweave-worker-" + std::to_string(::getpid()) + "-test";
  int named = ::shm_open(old.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  REQUIRE(named >= 0);
  ::close(named);
  CHECK_THROWS_WITH(open_worker_segment(old, 42, spec),
                    Catch::Contains("a segment by name"));
  ::shm_unlink(old.c_str());
  // Once welcomed the worker closes the name: nobody opens it any more.
  auto name = mine.name();
  mine.unlink();
  CHECK_THROWS(open_worker_segment(name, 42, spec));
}

TEST_CASE("the request ring keeps order and refuses when full", "[shm]") {
  auto ring = std::make_unique<spsc_ring<request, 8>>();
  request r{};
  for (uint64_t round = 0; round < 3; ++round) { // wraps around
    for (uint32_t i = 0; i < 8; ++i) {
      r.chunk = i;
      REQUIRE(ring->push(r));
    }
    CHECK_FALSE(ring->push(r));
    request out{};
    for (uint32_t i = 0; i < 8; ++i) {
      REQUIRE(ring->pop(out));
      CHECK(out.chunk == i);
    }
    CHECK_FALSE(ring->pop(out));
  }
}

TEST_CASE("shared memory segments of dead processes are removed", "[shm]") {
  // Names as an older node would leave them in /dev/shm: one of a killed process (pid
  // 2^22 + 7 is above pid_max's default), one of this live one.
  std::string stale = "/rackweave-node-4194311-00000000deadbeef";
  std::string live = "/rackweave-node-" + std::to_string(::getpid())
                     + "-00000000feedbeef";
  for (auto& name : {stale, live}) {
    int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  CHECK(rw::transports::shm::remove_stale_segments() >= 1);
  CHECK(shm_open(stale.c_str(), O_RDWR, 0) < 0);
  int kept = shm_open(live.c_str(), O_RDWR, 0);
  CHECK(kept >= 0);
  if (kept >= 0)
    ::close(kept);
  shm_unlink(live.c_str());
  // A doorbell is sealed memory now, in no directory: this process names it by /proc,
  // and workers take it as a descriptor (a handover).
  auto bell = rw::transports::shm::create_node_bell();
  CHECK(bell.name().rfind("/proc/", 0) == 0);
  CHECK_NOTHROW(rw::transports::shm::adopt_node_bell(
    ::open(bell.name().c_str(), O_RDWR | O_CLOEXEC)));
}

TEST_CASE(
  "the node keeps the tensor table it checked: a worker rewriting it moves nothing",
  "[shm]") {
  auto spec = spec_of(5000);
  auto mine = create_worker_segment(spec,
                                    42); // the worker's mapping: it may write anything
  connection conn{
    open_worker_segment(mine.name(), 42, spec), spec, "worker", 1, 0, false};
  auto* table = tensor_table(mine.as<header>());
  const auto planned = table[0];
  // After the check, the worker swaps tensor 0's gradient and result regions (and could
  // as well point them outside the segment).
  table[0].result_offset = planned.grad_offset;
  table[0].grad_offset = planned.result_offset;
  auto* result = reinterpret_cast<float*>(mine.data() + planned.result_offset) + 1024;
  auto* gradient = reinterpret_cast<float*>(mine.data() + planned.grad_offset) + 1024;

  // An update for chunk 1 lands where the node planned the result.
  std::vector<float> update(1024, 9.0f);
  rw::protocol::frame_header h;
  h.kind = rw::protocol::frame_kind::update;
  h.tensor_id = 0;
  h.chunk_index = 1;
  h.payload_bytes = 4096;
  iovec iov{update.data(), 4096};
  REQUIRE(conn.send(h, &iov, 1));
  CHECK(result[0] == 9.0f);
  CHECK(gradient[0] == 0.0f);

  // The node reads chunk 1's gradient where it planned it too.
  gradient[0] = 5.0f;
  uint32_t bytes = 0;
  auto* g = conn.gradient(0, 1, bytes);
  REQUIRE(g != nullptr);
  CHECK(bytes == 4096);
  CHECK(reinterpret_cast<const float*>(g)[0] == 5.0f);
}

TEST_CASE("completions the worker's ring has no room for wait in order, a worker that "
          "takes none is cut off",
          "[shm]") {
  auto spec = spec_of(5000);
  auto mine = create_worker_segment(spec, 42);
  auto* ring = &mine.as<header>()->completions;
  auto send_update = [](connection& c, uint64_t seq) {
    rw::protocol::frame_header h;
    h.kind = rw::protocol::frame_kind::update;
    h.tensor_id = 0;
    h.chunk_index = static_cast<uint32_t>(seq % 5);
    h.clock = seq;
    return c.send(h);
  };

  SECTION("in order, nothing dropped, the sender never waits") {
    connection conn{
      open_worker_segment(mine.name(), 42, spec), spec, "worker", 1, 0, true};
    const uint64_t total = ring_slots + 1000;
    for (uint64_t seq = 0; seq < total; ++seq)
      REQUIRE(send_update(conn, seq)); // before: the sender spun, then dropped it
    CHECK(conn.has_backlog());
    CHECK_FALSE(conn.backlog_fits());
    uint64_t next = 0;
    completion c;
    for (int round = 0; round < 10 && next < total; ++round) {
      while (ring->pop(c)) {
        REQUIRE(c.clock == next);
        ++next;
      }
      conn.flush_backlog(); // the endpoint's thread
    }
    CHECK(next == total);
    CHECK_FALSE(conn.has_backlog());
    CHECK(conn.is_open());
  }
  SECTION("a backlog past its bound cuts the worker off") {
    connection conn{
      open_worker_segment(mine.name(), 42, spec), spec, "worker", 1, 0, true};
    conn.set_send_limits(std::chrono::seconds(10), 100 * sizeof(completion));
    for (uint64_t seq = 0; seq < ring_slots + 100; ++seq)
      REQUIRE(send_update(conn, seq));
    CHECK_FALSE(send_update(conn, ring_slots + 100));
    CHECK_FALSE(conn.is_open());
    auto [code, why] = conn.close_reason();
    CHECK(code == rw::errc::timeout);
    CHECK_THAT(why, Catch::Contains("not taking its completions")
                      && Catch::Contains("--send-queue-mib"));
  }
  SECTION("a worker that takes none for the I/O timeout is cut off") {
    connection conn{
      open_worker_segment(mine.name(), 42, spec), spec, "worker", 1, 0, true};
    conn.set_send_limits(std::chrono::milliseconds(50), 1 << 20);
    for (uint64_t seq = 0; seq < ring_slots + 10; ++seq)
      REQUIRE(send_update(conn, seq));
    conn.flush_backlog();
    CHECK(conn.is_open()); // not yet
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    conn.flush_backlog();
    CHECK_FALSE(conn.is_open());
    CHECK_THAT(conn.close_reason().second,
               Catch::Contains("took none of its completions for 50 ms"));
  }
}

} // namespace rw_unit_shm
