// Which of a node's shards serve a job (logic/shard_set.hpp), without a node: how many
// for the job's bytes, which ones (the least loaded of each group), every chunk on one
// of them in turn, endpoints unchanged, and the auto rule.

#include <catch2/catch.hpp>

#include "logic/shard_set.hpp"

namespace rw_unit_shard_set {

using namespace rw::actors::detail;
using rw::runtime::routing_table;

namespace {

// A job of `floats` floats in one tensor, in chunks of 4 KiB (1,024 floats).
rw::job_spec job_of(uint64_t floats, uint32_t chunk_bytes = 4096) {
  rw::job_spec s;
  s.name = "small";
  s.num_workers = 4;
  s.chunk_bytes = chunk_bytes;
  s.optimizer.kind = rw::optimizer_kind::momentum;
  s.optimizer.learning_rate = 0.1f;
  s.tensors = {{"w", floats, false}};
  return s;
}

} // namespace

TEST_CASE("a small job is served by one shard per share of its bytes, in turn",
          "[shard_set]") {
  routing_table routes{job_of(4 * 1024), 12};  // 16 KiB: 4 chunks
  auto set = narrow_job(routes, 4096, {}, {}); // a shard per 4 KiB: 4 shards
  CHECK(set.shards == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(set.moves.empty()); // round-robin already put chunk g on shard g
  auto wide = routing_table{job_of(64 * 1024), 12}; // 256 KiB: 64 chunks
  auto narrow = narrow_job(wide, 64 << 10, {}, {}); // a shard per 64 KiB: 4
  REQUIRE(narrow.shards == std::vector<uint32_t>{0, 1, 2, 3});
  auto moved = wide.remapped(narrow.moves);
  CHECK(moved->chunks_per_shard()
        == std::vector<uint64_t>{16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0});
  // In turn, in (tensor, index) order: chunk g on shard g mod 4.
  for (uint32_t c = 0; c < 64; ++c)
    CHECK(moved->shard_of(0, c) == c % 4);
  // Endpoints are those of each chunk's first shard: a worker's table never knows.
  for (uint32_t c = 0; c < 64; ++c)
    CHECK(moved->endpoint_of(0, c) == wide.endpoint_of(0, c));
  CHECK(narrow.why.find("4 of 12") != std::string::npos);
}

TEST_CASE("the least loaded shards are chosen, ties by index", "[shard_set]") {
  routing_table routes{job_of(8 * 1024), 6}; // 32 KiB: 8 chunks
  std::vector<uint64_t> load{100, 0, 50, 0, 7, 0};
  auto set = narrow_job(routes, 16 << 10, {}, load); // 2 shards
  CHECK(set.shards == std::vector<uint32_t>{1, 3});
  CHECK(routes.remapped(set.moves)->chunks_per_shard()
        == std::vector<uint64_t>{0, 4, 0, 4, 0, 0});
  // add_load counts what it serves, so the next small job goes elsewhere.
  add_load(*routes.remapped(set.moves), load);
  CHECK(load == std::vector<uint64_t>{100, 16 << 10, 50, 16 << 10, 7, 0});
  auto next = narrow_job(routes, 16 << 10, {}, load);
  CHECK(next.shards == std::vector<uint32_t>{4, 5});
}

TEST_CASE("a job too big, or a share of 0, keeps every shard", "[shard_set]") {
  routing_table routes{job_of(64 * 1024), 4}; // 256 KiB
  for (uint64_t share : {uint64_t{0}, uint64_t{64} << 10, uint64_t{1} << 10}) {
    auto set = narrow_job(routes, share, {}, {});
    CHECK(set.moves.empty());
    CHECK(set.shards == std::vector<uint32_t>{0, 1, 2, 3});
    CHECK(set.why.find("all 4") == 0);
  }
  // The smallest job still has one shard.
  routing_table tiny{job_of(10), 4};
  auto one = narrow_job(tiny, 1 << 20, {}, {1, 0, 0, 0});
  CHECK(one.shards == std::vector<uint32_t>{1});
  CHECK(tiny.remapped(one.moves)->shard_of(0, 0) == 1);
}

TEST_CASE("each group of shards (a NUMA domain's endpoints) keeps its chunks",
          "[shard_set]") {
  // Shards 0-3 serve endpoint 0, shards 4-7 endpoint 1.
  std::vector<std::vector<uint32_t>> eps{{0}, {0}, {0}, {0}, {1}, {1}, {1}, {1}};
  routing_table routes{job_of(16 * 1024), 8, eps}; // 64 KiB: 16 chunks, 8 per group
  auto set = narrow_job(routes, 16 << 10, eps, {0, 0, 0, 0, 0, 0, 0, 9});
  // 32 KiB per group: 2 shards each, the least loaded (shard 7 is not).
  CHECK(set.shards == std::vector<uint32_t>{0, 1, 4, 5});
  auto moved = routes.remapped(set.moves);
  for (uint32_t c = 0; c < 16; ++c) {
    auto first = routes.shard_of(0, c);
    auto now = moved->shard_of(0, c);
    CHECK((first < 4) == (now < 4)); // never across groups
    CHECK(moved->endpoint_of(0, c) == routes.endpoint_of(0, c));
  }
  CHECK(moved->chunks_per_shard() == std::vector<uint64_t>{4, 4, 0, 0, 4, 4, 0, 0});
}

TEST_CASE("auto narrows on a node of 8 shards or more, a share of 0 never",
          "[shard_set]") {
  auto small = choose_bytes_per_shard(true, 0, 2);
  CHECK(small.bytes_per_shard == 0);
  CHECK(small.why.find("fewer than 8") != std::string::npos);
  auto big = choose_bytes_per_shard(true, 0, 12);
  CHECK(big.bytes_per_shard == 1u << 20);
  CHECK(choose_bytes_per_shard(false, 0, 12).bytes_per_shard == 0);
  CHECK(choose_bytes_per_shard(false, 256, 2).bytes_per_shard == 256u << 10);
}

} // namespace rw_unit_shard_set
