#include <algorithm>

#include <catch2/catch.hpp>

#include "runtime/chunking.hpp"

namespace rw_unit_chunking {

using rw::runtime::chunk_layout;
using rw::runtime::routing_table;

TEST_CASE("a tensor is cut into full chunks and one shorter tail", "[chunking]") {
  chunk_layout l{5000, 4096}; // 1024 floats per chunk
  REQUIRE(l.count() == 5);
  CHECK(l.offset(0) == 0);
  CHECK(l.offset(4) == 4096);
  CHECK(l.length(0) == 1024);
  CHECK(l.length(3) == 1024);
  CHECK(l.length(4) == 5000 - 4096);
  uint64_t total = 0;
  for (uint32_t i = 0; i < l.count(); ++i)
    total += l.length(i);
  CHECK(total == 5000);
}

TEST_CASE("exact multiples and tensors smaller than a chunk", "[chunking]") {
  CHECK(chunk_layout{2048, 4096}.count() == 2);
  CHECK(chunk_layout{2048, 4096}.length(1) == 1024);
  CHECK(chunk_layout{1, 32768}.count() == 1);
  CHECK(chunk_layout{1, 32768}.length(0) == 1);
}

TEST_CASE("the routing table spreads chunks evenly and indexes them densely",
          "[chunking]") {
  rw::job_spec spec;
  spec.chunk_bytes = 4096;
  spec.tensors = {{"a", 1000, false}, {"b", 5000, false}, {"c", 3333, false}};
  for (uint32_t shards : {1u, 2u, 3u, 7u}) {
    routing_table rt{spec, shards};
    REQUIRE(rt.total_chunks() == 1 + 5 + 4);
    auto load = rt.chunks_per_shard();
    auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    CHECK(*hi - *lo <= 1);
    // Local indexes of each shard are 0..n-1 with no gaps or repeats.
    std::vector<std::vector<uint64_t>> seen(shards);
    for (uint32_t t = 0; t < rt.num_tensors(); ++t)
      for (uint32_t c = 0; c < rt.layout(t).count(); ++c)
        seen[rt.shard_of(t, c)].push_back(rt.local_index(t, c));
    for (uint32_t s = 0; s < shards; ++s) {
      std::sort(seen[s].begin(), seen[s].end());
      for (uint64_t i = 0; i < seen[s].size(); ++i)
        CHECK(seen[s][i] == i);
    }
  }
}

TEST_CASE("chunks moved between shards keep their endpoint", "[chunking][balance]") {
  rw::job_spec spec;
  spec.chunk_bytes = 16; // 4 floats
  spec.tensors = {{"w0", 4}, {"b0", 1}, {"w1", 4}, {"b1", 1}};
  routing_table t{spec, 2, {{0, 1}, {0, 1}}};
  // Round-robin: every weight on shard 0, every bias on shard 1.
  REQUIRE(t.shard_of(0, 0) == 0);
  REQUIRE(t.shard_of(2, 0) == 0);
  REQUIRE(t.shard_of(1, 0) == 1);
  CHECK_FALSE(t.is_remapped());
  auto m = t.remapped({{2, 0, 1}});
  CHECK(m->is_remapped());
  CHECK(m->shard_of(2, 0) == 1);
  CHECK(m->first_shard_of(2, 0) == 0);
  CHECK(m->shard_of(0, 0) == 0);
  CHECK(m->chunks_per_shard() == std::vector<uint64_t>{1, 3});
  // Shard 1's chunks numbered again in (tensor, index) order: b0, w1, b1.
  CHECK(m->local_index(1, 0) == 0);
  CHECK(m->local_index(2, 0) == 1);
  CHECK(m->local_index(3, 0) == 2);
  CHECK(m->local_index(0, 0) == 0);
  for (uint32_t x = 0; x < 4; ++x)
    CHECK(m->endpoint_of(x, 0) == t.endpoint_of(x, 0)); // workers notice nothing
  // Moved back: the first table's numbering again.
  auto back = m->remapped({{2, 0, 0}});
  for (uint32_t x = 0; x < 4; ++x) {
    CHECK(back->shard_of(x, 0) == t.shard_of(x, 0));
    CHECK(back->local_index(x, 0) == t.local_index(x, 0));
  }
  CHECK_THROWS_AS(t.remapped({{0, 0, 2}}), std::invalid_argument); // no shard 2
  CHECK_THROWS_AS(t.remapped({{4, 0, 1}}), std::invalid_argument); // no tensor 4
}

} // namespace rw_unit_chunking
