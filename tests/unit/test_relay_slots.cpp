// Where a rack's uplink lands a chunk's answer from its home in a hierarchical job
// (actors/links/relay_slots.hpp, rack_uplink's on_header): into the buffer of the
// partial in flight, for the version it asks for, once. The buffer becomes the rack
// part's parameters once the answer is in, so an update not asked for must land
// nowhere. Before 9bc20e7 the uplink kept the pointer after the answer and took any
// version: a repeat or a late update would have been written over the rack's
// parameters (a candidate cause of the hierarchical restore's two bitwise failures,
// issue 38). And until this test, logging such an update locked the uplink's mutex
// twice (node_of under on_header's lock): the uplink's receiver thread hung there.

#include <cstddef>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/links/rack_uplink.hpp"
#include "actors/links/relay_slots.hpp"

namespace rw_unit_relay_slots {

using namespace rw;
using namespace rw::actors;

TEST_CASE("a chunk's answer lands in its partial's buffer once, at the version asked "
          "for, nothing else lands anywhere",
          "[links][hierarchical]") {
  relay_slots slots{4};
  float partial[8] = {};
  float next[8] = {};
  CHECK(slots.target(2, 4) == nullptr); // nothing on its way
  CHECK(slots.why_not(2) == "no partial of it is on its way");

  slots.expect(2, partial, 4); // the partial of step 3 asks for version 4
  CHECK(slots.target(2, 4) == partial);
  CHECK(slots.target(2, 3) == nullptr); // the current version (a pull's answer)
  CHECK(slots.target(2, 5) == nullptr);
  CHECK(slots.target(1, 4) == nullptr); // another chunk
  CHECK(slots.why_not(2) == "its partial in flight asks for version 4");

  CHECK(slots.take(2) == partial); // the answer is in: the buffer is the shard's again
  CHECK(slots.target(2, 4) == nullptr); // a repeat of it lands nowhere
  CHECK(slots.take(2) == nullptr);

  slots.expect(2, next, 5); // the next step's partial
  CHECK(slots.target(2, 4) == nullptr);
  CHECK(slots.target(2, 5) == next);
}

namespace {

uplink_settings one_tensor(uint32_t elements, uint32_t chunk_bytes) {
  uplink_settings s;
  s.join.job.name = "top";
  s.join.job.chunk_bytes = chunk_bytes;
  s.join.job.tensors.push_back({"w", elements, false});
  s.node_name = "n0";
  return s;
}

protocol::frame_header update(uint32_t chunk, uint64_t version, uint32_t floats) {
  protocol::frame_header h;
  h.kind = protocol::frame_kind::update;
  h.tensor_id = 0;
  h.chunk_index = chunk;
  h.clock = version;
  h.payload_bytes = floats * sizeof(float);
  return h;
}

} // namespace

TEST_CASE("a rack's uplink receives only the answer to its partial into the partial's "
          "buffer and drops any other update of the chunk",
          "[links][hierarchical]") {
  // 4 chunks of 256 floats; the uplink is not started (no join, no threads): the
  // receiver's calls are made here, as its thread would make them.
  rack_uplink up{one_tensor(1024, 1024)};
  std::vector<float> partial(256, 1.0f);
  transports::connection_ptr home; // the logs name its node: "?" (not joined)

  up.push(0, 1, 3, partial.data()); // step 3's partial of chunk 1: asks for version 4
  // A pull's answer at the current version (what a restored job's uplink once asked
  // for) and a version beyond: dropped (a deadlock here hangs until ctest's timeout).
  auto current = up.on_header(home, update(1, 3, 256));
  CHECK(current.action == transports::payload_target::discard);
  auto beyond = up.on_header(home, update(1, 5, 256));
  CHECK(beyond.action == transports::payload_target::discard);
  // The answer: into the partial's buffer.
  auto answer = up.on_header(home, update(1, 4, 256));
  CHECK(answer.action == transports::payload_target::receive);
  CHECK(answer.dst == reinterpret_cast<std::byte*>(partial.data()));
  // Another chunk's update, with no partial of it on its way: dropped.
  auto other = up.on_header(home, update(2, 4, 256));
  CHECK(other.action == transports::payload_target::discard);
}

} // namespace rw_unit_relay_slots
