#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <stdexcept>

#include "runtime/chunking.hpp"
#include "runtime/ring.hpp"

namespace rw_unit_ring {

using rw::runtime::hash_ring;
using rw::runtime::routing_table;

namespace {

rw::job_spec spec_of(uint64_t elements_a, uint64_t elements_b) {
  rw::job_spec s;
  s.name = "ring";
  s.num_workers = 2;
  s.tensors = {{"fc.w", elements_a, false}, {"fc.b", elements_b, false}};
  return s;
}

// Homes of chunks 0..n-1 of one tensor.
std::vector<std::string> homes(const hash_ring& ring, uint32_t n) {
  std::vector<std::string> out;
  for (uint32_t c = 0; c < n; ++c)
    out.push_back(ring.nodes()[ring.owner("layer", c)]);
  return out;
}

} // namespace

TEST_CASE("the ring spreads chunks over every node, the same way every time", "[ring]") {
  hash_ring ring{{"a", "b", "c"}};
  std::map<uint32_t, uint32_t> load;
  const uint32_t chunks = 3000;
  for (uint32_t c = 0; c < chunks; ++c)
    ++load[ring.owner("layer", c)];
  REQUIRE(load.size() == 3);
  for (auto& [node, n] : load) {
    INFO("node " << node << " owns " << n);
    CHECK(n > chunks / 3 * 0.75);
    CHECK(n < chunks / 3 * 1.25);
  }
  hash_ring again{{"a", "b", "c"}};
  CHECK(homes(ring, 500) == homes(again, 500));
  // The order nodes are listed in changes indexes, not homes.
  hash_ring shuffled{{"c", "a", "b"}};
  CHECK(homes(ring, 500) == homes(shuffled, 500));
}

TEST_CASE("removing one of N nodes moves only its chunks, about 1/N", "[ring]") {
  const uint32_t chunks = 4000;
  for (uint32_t n : {2u, 3u, 4u, 8u}) {
    std::vector<std::string> names;
    for (uint32_t i = 0; i < n; ++i)
      names.push_back("node-" + std::to_string(i));
    hash_ring before{names};
    auto gone = names.back();
    names.pop_back();
    hash_ring after{names, rw::defaults::ring_vnodes, 2};
    auto a = homes(before, chunks);
    auto b = homes(after, chunks);
    uint32_t moved = 0;
    for (uint32_t c = 0; c < chunks; ++c)
      if (a[c] != b[c]) {
        ++moved;
        CHECK(a[c] == gone); // only the departed node's chunks move
      }
    double share = double(moved) / chunks;
    INFO(n << " nodes: " << moved << " of " << chunks << " chunks moved");
    CHECK(share > 1.0 / n * 0.7);
    CHECK(share < 1.0 / n * 1.3);
  }
}

TEST_CASE("the ring refuses a node list it cannot hash", "[ring]") {
  CHECK_THROWS_AS(hash_ring({}), std::invalid_argument);
  CHECK_THROWS_AS(hash_ring({"a", ""}), std::invalid_argument);
  CHECK_THROWS_AS(hash_ring({"a", "b", "a"}), std::invalid_argument);
  CHECK_THROWS_AS(hash_ring({"a"}, 0), std::invalid_argument);
}

TEST_CASE("each node's table routes exactly the chunks the ring homes there", "[ring]") {
  auto spec = spec_of(100'000, 3'000); // 32 KiB chunks: 13 + 1 chunks
  hash_ring ring{{"a", "b"}, 16};
  routing_table a{spec, 3, {}, &ring, 0};
  routing_table b{spec, 2, {{0}, {1}}, &ring, 1};
  uint64_t total = 0;
  std::vector<std::set<uint64_t>> used_a(3), used_b(2);
  for (uint32_t t = 0; t < 2; ++t)
    for (uint32_t c = 0; c < a.layout(t).count(); ++c) {
      auto home = ring.owner(spec.tensors[t].name, c);
      CHECK(a.is_local(t, c) == (home == 0));
      CHECK(b.is_local(t, c) == (home == 1));
      auto& mine = home == 0 ? a : b;
      auto& other = home == 0 ? b : a;
      CHECK(other.shard_of(t, c) == routing_table::not_here);
      auto shard = mine.shard_of(t, c);
      REQUIRE(shard < mine.num_shards());
      // Every local chunk has its own slot in its shard.
      auto& used = home == 0 ? used_a : used_b;
      CHECK(used[shard].insert(mine.local_index(t, c)).second);
      ++total;
    }
  CHECK(a.local_chunks() + b.local_chunks() == total);
  CHECK(a.total_chunks() == total);
  uint64_t per_shard = 0;
  for (auto n : a.chunks_per_shard())
    per_shard += n;
  CHECK(per_shard == a.local_chunks());
  CHECK(b.chunks_per_endpoint() == b.chunks_per_shard());

  // A worker's routes: node b's endpoints come after node a's one.
  rw::runtime::job_routes routes{
    {std::make_shared<routing_table>(spec, 3, std::vector<std::vector<uint32_t>>{}, &ring,
                                     0),
     std::make_shared<routing_table>(
       spec, 2, std::vector<std::vector<uint32_t>>{{0}, {1}}, &ring, 1)},
    {0, 1}};
  for (uint32_t t = 0; t < 2; ++t)
    for (uint32_t c = 0; c < a.layout(t).count(); ++c) {
      auto home = ring.owner(spec.tensors[t].name, c);
      CHECK(routes.home_of(t, c) == home);
      CHECK(routes.connection_of(t, c) == (home == 0 ? 0u : 1u + b.endpoint_of(t, c)));
    }
}

TEST_CASE("without a ring a table routes every chunk, as before", "[ring]") {
  auto spec = spec_of(100'000, 3'000);
  routing_table rt{spec, 2};
  CHECK(rt.local_chunks() == rt.total_chunks());
  for (uint32_t c = 0; c < rt.layout(0).count(); ++c)
    CHECK(rt.shard_of(0, c) == c % 2);
}

TEST_CASE("a layer-wise job homes each tensor whole, at its chunk 0's home", "[ring]") {
  auto spec = spec_of(100'000, 3'000);
  spec.tensors.push_back({"conv.w", 200'000, false});
  spec.optimizer.kind = rw::optimizer_kind::lamb;
  hash_ring ring{{"a", "b", "c"}, 16};
  std::vector<routing_table> tables;
  for (uint32_t n = 0; n < 3; ++n)
    tables.emplace_back(spec, 2, std::vector<std::vector<uint32_t>>{}, &ring, n);
  for (uint32_t t = 0; t < spec.tensors.size(); ++t) {
    auto home = ring.owner(spec.tensors[t].name, 0);
    for (uint32_t c = 0; c < tables[0].layout(t).count(); ++c)
      for (uint32_t n = 0; n < 3; ++n)
        CHECK(tables[n].is_local(t, c) == (n == home));
  }
  // Other optimizers spread a tensor's chunks.
  spec.optimizer.kind = rw::optimizer_kind::adam;
  routing_table spread{spec, 2, {}, &ring, ring.owner("conv.w", 0)};
  CHECK(spread.local_chunks() < spread.total_chunks());
}

} // namespace rw_unit_ring
