// What a node holds of a job, decided from its layout (logic/job_plan.hpp), without a
// node: its place on the ring, its routes, a hierarchical job's rack part, and where a
// moved job's chunks go and land.

#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>

#include "logic/job_plan.hpp"
#include "runtime/checkpoint/chunk_file.hpp"
#include "runtime/ring.hpp"

namespace rw_unit_job_plan {

using namespace rw::actors::detail;
using rw::job_layout;
using rw::runtime::checkpoint::chunk_file;
using rw::runtime::checkpoint::chunk_record;

namespace {

rw::job_spec spec_of(uint32_t workers) {
  rw::job_spec s;
  s.name = "plan";
  s.num_workers = workers;
  s.chunk_bytes = 4096; // 1,024 floats a chunk
  s.optimizer.kind = rw::optimizer_kind::adam;
  s.optimizer.learning_rate = 0.01f;
  s.tensors = {{"fc.w", 20'000, false}, {"fc.b", 3'000, false}}; // 20 + 3 chunks
  return s;
}

job_layout flat(std::vector<std::string> nodes, uint32_t replicas = 0) {
  job_layout l;
  l.nodes = std::move(nodes);
  l.vnodes = 16;
  l.replicas = replicas;
  return l;
}

chunk_record record(uint32_t tensor, uint32_t chunk, uint64_t version) {
  chunk_record r;
  r.tensor = tensor;
  r.chunk = chunk;
  r.version = version;
  r.params = {float(tensor), float(chunk)};
  r.m = {1.0f};
  r.v = {2.0f};
  return r;
}

// Every chunk of `spec`, at `version`.
std::vector<chunk_record> every_chunk(const rw::job_spec& spec, uint64_t version) {
  std::vector<chunk_record> out;
  rw::runtime::routing_table all{spec, 1};
  for (uint32_t t = 0; t < all.num_tensors(); ++t)
    for (uint32_t c = 0; c < all.layout(t).count(); ++c)
      out.push_back(record(t, c, version + c % 3));
  return out;
}

} // namespace

TEST_CASE("a node finds its place among the job's nodes, or is left out", "[job_plan]") {
  auto l = flat({"n0", "n1", "n2"});
  CHECK(node_index_in(l, "n0") == 0u);
  CHECK(node_index_in(l, "n2") == 2u);
  CHECK_FALSE(node_index_in(l, "n3").has_value());
  CHECK_FALSE(node_index_in(job_layout{}, "n0").has_value());
}

TEST_CASE("a flat job on several nodes routes only the chunks its ring homes there",
          "[job_plan]") {
  auto spec = spec_of(2);
  auto l = flat({"a", "b", "c"});
  rw::runtime::hash_ring ring{l.nodes, l.vnodes, l.ring_version};
  uint64_t total = 0, served = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    auto routes = node_routes(spec, l, i, 2, {});
    REQUIRE(routes->num_shards() == 2);
    for (uint32_t t = 0; t < 2; ++t)
      for (uint32_t c = 0; c < routes->layout(t).count(); ++c)
        CHECK(routes->is_local(t, c)
              == (rw::runtime::home_on_ring(ring, spec, t, c) == i));
    served += routes->local_chunks();
    total = routes->total_chunks();
  }
  CHECK(total == 23);
  CHECK(served == total); // each chunk homed on exactly one node

  // With a replica, each node also serves the chunks it keeps for another's.
  auto r = flat({"a", "b", "c"}, 1);
  uint64_t replicas = 0;
  for (uint32_t i = 0; i < 3; ++i)
    replicas += node_routes(spec, r, i, 2, {})->replica_chunks();
  CHECK(replicas == total);
}

TEST_CASE("one node, or a hierarchical job's rack part, routes every chunk",
          "[job_plan]") {
  auto spec = spec_of(4);
  auto one = node_routes(spec, flat({"solo"}), 0, 3, {});
  CHECK(one->local_chunks() == one->total_chunks());
  auto open = node_routes(spec, job_layout{}, 0, 3, {});
  CHECK(open->local_chunks() == 23);
  auto h = flat({"r0", "r1"});
  h.reduction = "hierarchical";
  auto part = node_routes(spec, h, 1, 3, {{0}, {1}, {0, 1}});
  CHECK(part->local_chunks() == 23);
  CHECK(part->shard_endpoints().size() == 3);
}

TEST_CASE("a rack part sums its rack's ranks in rank order and runs no optimizer",
          "[job_plan]") {
  auto spec = spec_of(5);
  auto plan = plan_rack_part(spec, {1, 0, 1, 1, 0}, 1);
  CHECK(plan.global_rank == std::vector<uint32_t>{0, 2, 3});
  CHECK(plan.local_rank
        == std::vector<uint32_t>{0, rack_part_plan::other_rack, 1, 2,
                                 rack_part_plan::other_rack});
  CHECK(plan.spec.num_workers == 3);
  CHECK(plan.spec.optimizer.kind == rw::optimizer_kind::sum);
  CHECK(plan.spec.optimizer.rescale == 1.0f);
  CHECK(plan.spec.name == spec.name);
  CHECK(plan.spec.tensors.size() == spec.tensors.size());
  auto other = plan_rack_part(spec, {1, 0, 1, 1, 0}, 0);
  CHECK(other.global_rank == std::vector<uint32_t>{1, 4});
  // A rack with none of the job's ranks sums nobody's.
  CHECK(plan_rack_part(spec, {0, 0, 0, 0, 0}, 1).spec.num_workers == 0);
  // A map that does not cover every rank is refused, not read past its end.
  CHECK_THROWS_AS(plan_rack_part(spec, {0, 1}, 0), std::invalid_argument);
}

TEST_CASE("a restored rack part keeps parameters and versions, not optimizer state",
          "[job_plan]") {
  std::vector<std::vector<chunk_record>> shards{{record(0, 0, 7), record(0, 1, 7)},
                                                {record(1, 0, 8)}};
  drop_optimizer_state(shards);
  for (auto& s : shards)
    for (auto& r : s) {
      CHECK(r.m.empty());
      CHECK(r.v.empty());
      CHECK(r.params.size() == 2);
    }
  CHECK(shards[1][0].version == 8);
}

TEST_CASE("a moved job's chunks go to their new homes and land on the right shards",
          "[job_plan]") {
  auto spec = spec_of(2);
  auto before = every_chunk(spec, 40);
  auto next = flat({"a", "b", "c"}, GENERATE(0u, 1u));
  // Every node settles what it held on the old ring (here: one node held it all), and
  // splits it by the new ring.
  auto split = split_for_move(before, spec, next, "b");
  CHECK(split.lowest_version == 40);
  CHECK(split.highest_version == 42);
  CHECK(split.leaving.count("b") == 0);
  size_t copies = split.staying.size();
  for (auto& [node, chunks] : split.leaving) {
    CHECK((node == "a" || node == "c"));
    copies += chunks.size();
  }
  CHECK(copies == before.size() * (next.replicas + 1));

  // Each node of the new ring places what stays and what the others sent it: all of
  // what it serves there, each on its shard by the new routes.
  std::set<std::pair<uint32_t, uint32_t>> homed;
  for (uint32_t i = 0; i < 3; ++i) {
    auto& name = next.nodes[i];
    auto routes = node_routes(spec, next, i, 2, {});
    chunk_placement placed{routes, name};
    if (name == "b")
      for (auto& r : split.staying)
        CHECK(placed.keep(std::move(r)).empty());
    for (auto& [node, chunks] : split.leaving) {
      if (node != name)
        continue;
      chunk_file f{spec.name, 0, "b", chunks};
      std::string why;
      CHECK(placed.receive(rw::runtime::checkpoint::encode(f), why) == rw::errc::ok);
      CHECK(why.empty());
      CHECK(placed.arrived() == chunks.size());
    }
    CHECK(placed.check_complete(spec.name).empty());
    auto per_shard = placed.take();
    REQUIRE(per_shard.size() == 2);
    for (uint32_t s = 0; s < 2; ++s)
      for (auto& r : per_shard[s]) {
        CHECK(routes->shard_of(r.tensor, r.chunk) == s);
        CHECK(r.version == 40 + r.chunk % 3);
        if (routes->is_owned(r.tensor, r.chunk))
          CHECK(homed.insert({r.tensor, r.chunk}).second);
      }
  }
  CHECK(homed.size() == before.size()); // every chunk has one home on the new ring
}

TEST_CASE("a reshape refuses chunks the new ring does not give the node, and a short "
          "count",
          "[job_plan]") {
  auto spec = spec_of(2);
  auto next = flat({"a", "b"});
  auto routes = node_routes(spec, next, 0, 2, {});
  rw::runtime::hash_ring ring{next.nodes, next.vnodes, next.ring_version};
  chunk_record theirs, ours;
  bool found_theirs = false, found_ours = false;
  for (uint32_t c = 0; c < 20; ++c) {
    auto home = rw::runtime::home_on_ring(ring, spec, 0, c);
    if (home == 1 && !found_theirs) {
      theirs = record(0, c, 1);
      found_theirs = true;
    }
    if (home == 0 && !found_ours) {
      ours = record(0, c, 1);
      found_ours = true;
    }
  }
  REQUIRE(found_theirs);
  REQUIRE(found_ours);
  chunk_placement placed{routes, "a"};
  CHECK(placed.keep(chunk_record(ours)).empty());
  CHECK_THAT(placed.keep(chunk_record(theirs)),
             Catch::Contains("is not homed on node a"));
  CHECK_THAT(placed.keep(record(9, 0, 1)), Catch::Contains("chunk 9/0"));
  CHECK_THAT(placed.keep(record(1, 99, 1)), Catch::Contains("chunk 1/99"));
  CHECK(placed.placed() == 1);
  CHECK_THAT(placed.check_complete("plan"), Catch::Contains("node a has 1 of the")
                                              && Catch::Contains("chunks the new ring"));

  // A file that does not decode is a bad frame; one with a foreign chunk, internal.
  std::string why;
  CHECK(placed.receive({1, 2, 3}, why) == rw::errc::bad_frame);
  CHECK_FALSE(why.empty());
  chunk_file f{spec.name, 0, "b", {theirs}};
  CHECK(placed.receive(rw::runtime::checkpoint::encode(f), why) == rw::errc::internal);
  CHECK_THAT(why, Catch::Contains("not homed on node a"));
}

} // namespace rw_unit_job_plan
