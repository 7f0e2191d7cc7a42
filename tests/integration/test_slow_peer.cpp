// One slow peer stalls nobody else: a worker that asks for results and never reads
// them is cut off (its send queue past its bound, or untouched for the I/O timeout),
// while another job on the same shard keeps stepping. Before send queues, the shard
// waited on the stalled socket for the whole I/O timeout, for every job it serves.

#include <chrono>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "rackweave/worker.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_slow_peer {

using namespace rw;
using namespace std::chrono_literals;
using protocol::frame_header;
using protocol::frame_kind;

namespace {

constexpr uint32_t io_timeout_ms = 4000;

job_spec job_of(const std::string& name, uint64_t elements, uint32_t chunk_bytes) {
  job_spec s;
  s.name = name;
  s.num_workers = 1;
  s.chunk_bytes = chunk_bytes;
  s.tensors = {{"t", elements, false}};
  return s;
}

// The stalled peer: joins a 32 MiB job and pushes every chunk asking for its result
// (a push_pull), then reads nothing: its updates pile up at the node. Returns how many
// chunks it pushed before the node cut it off (all of them if it did not).
uint32_t stall(testing::raw_client& peer, const job_spec& spec) {
  auto id = peer.join(spec, 0);
  auto elements = spec.chunk_bytes / 4;
  std::vector<float> grad(elements, 1.0f);
  auto chunks = static_cast<uint32_t>(spec.tensors[0].elements / elements);
  for (uint32_t c = 0; c < chunks; ++c) {
    frame_header h;
    h.kind = frame_kind::push;
    h.flags = protocol::flag_want_result;
    h.job_id = id;
    h.chunk_index = c;
    try {
      peer.send_floats(h, grad);
    } catch (const std::runtime_error&) {
      return c; // cut off already
    }
  }
  return chunks;
}

// A one-worker job on the same node (and shard), joined before the peer stalls.
worker steady_worker(testing::node_process& node) {
  worker_options o;
  o.connect = node.address();
  o.job = job_of("steady", 4096, 4096);
  o.request_timeout = std::chrono::seconds(30);
  return worker{o};
}

// Steps `w` until the node's log says `cut` (and 20 steps ran) or 30 s pass; returns
// the longest step. Every result is checked.
std::chrono::milliseconds step_until_cut(worker& w, testing::node_process& node,
                                         const std::string& cut) {
  std::vector<float> g(4096, 3.0f), out(4096, 0.0f);
  std::chrono::milliseconds longest{0};
  auto deadline = std::chrono::steady_clock::now() + 30s;
  int steps = 0;
  while (std::chrono::steady_clock::now() < deadline
         && (node.log().find(cut) == std::string::npos || steps < 20)) {
    auto start = std::chrono::steady_clock::now();
    w.push_pull("t", g.data(), out.data()).get();
    longest = std::max(longest, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start));
    REQUIRE(out[0] == 3.0f);
    REQUIRE(out[4095] == 3.0f);
    ++steps;
  }
  return longest;
}

} // namespace

TEST_CASE("a worker that reads nothing is cut off past its send queue's bound, the other "
          "job on its shard keeps stepping",
          "[integration][bad][slow]") {
  testing::node_process node{{"--shards", "1", "--io-timeout-ms",
                              std::to_string(io_timeout_ms), "--send-queue-mib", "2"}};
  auto w = steady_worker(node);
  testing::raw_client peer{node.address()};
  CHECK(stall(peer, job_of("stalled", 8u << 20, 64 * 1024)) > 0);
  auto longest = step_until_cut(w, node, "the peer is not reading");
  INFO(node.log());
  CHECK_THAT(node.log(), Catch::Contains("connection closed: peer=")
                           && Catch::Contains("the peer is not reading")
                           && Catch::Contains("the limit is 2097152 (--send-queue-mib)"));
  // Waiting on the stalled socket took io_timeout_ms; the others' steps take a few ms.
  UNSCOPED_INFO("the other job's longest step: " << longest.count() << " ms");
  CHECK(longest.count() < io_timeout_ms / 2);
  CHECK(peer.closed_by_peer(10s));
}

TEST_CASE("a worker that reads nothing for the I/O timeout is cut off, the other job on "
          "its shard keeps stepping",
          "[integration][bad][slow]") {
  testing::node_process node{
    {"--shards", "1", "--io-timeout-ms", std::to_string(io_timeout_ms)}};
  auto w = steady_worker(node);
  testing::raw_client peer{node.address()};
  CHECK(stall(peer, job_of("stalled", 8u << 20, 64 * 1024)) == 512);
  auto longest = step_until_cut(w, node, "for 4000 ms (--io-timeout-ms)");
  INFO(node.log());
  CHECK_THAT(node.log(), Catch::Contains("connection closed: peer=")
                           && Catch::Contains("the peer took nothing of the")
                           && Catch::Contains("for 4000 ms (--io-timeout-ms)"));
  UNSCOPED_INFO("the other job's longest step: " << longest.count() << " ms");
  CHECK(longest.count() < io_timeout_ms / 2);
  CHECK(peer.closed_by_peer(10s));
}

} // namespace rw_integration_slow_peer
