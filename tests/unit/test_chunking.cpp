#include <algorithm>

#include <catch2/catch.hpp>

#include "runtime/chunking.hpp"

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
