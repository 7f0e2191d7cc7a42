// Shared memory segments: their format, checks and rings (no node needed).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "transports/shm/segment.hpp"

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
  CHECK_THROWS_WITH(open_worker_segment(mine.name(), 43, spec), Catch::Contains("not the one"));
  CHECK_THROWS_WITH(open_worker_segment(mine.name(), 42, spec_of(5001)),
                    Catch::Contains("does not match"));
  CHECK_THROWS_WITH(open_worker_segment("/etc-passwd", 42, spec), Catch::Contains("not a RackWeave"));
  auto opened = open_worker_segment(mine.name(), 42, spec);
  // Both mappings see the same memory, regions cache- and page-aligned.
  auto* table = tensor_table(opened.as<header>());
  CHECK(table[0].grad_offset % region_align == 0);
  CHECK(table[1].result_offset + 7 * 4 <= opened.size());
  reinterpret_cast<float*>(mine.data() + table[1].grad_offset)[6] = 3.5f;
  CHECK(reinterpret_cast<float*>(opened.data() + table[1].grad_offset)[6] == 3.5f);
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
  // A name as a killed node would leave it: pid 2^22 + 7 is above pid_max's default.
  std::string stale = "/rackweave-node-4194311-00000000deadbeef";
  {
    auto m = rw::transports::shm::mapping::create(stale, 4096);
    (void) m;
  } // the creator's destructor unlinks; recreate without a live owner:
  int fd = shm_open(stale.c_str(), O_CREAT | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto live = rw::transports::shm::create_node_bell(); // ours: this process is alive
  CHECK(rw::transports::shm::remove_stale_segments() >= 1);
  CHECK(shm_open(stale.c_str(), O_RDWR, 0) < 0);
  CHECK_NOTHROW(rw::transports::shm::open_node_bell(live.name()));
}
