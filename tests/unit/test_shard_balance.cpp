// In-node balancing, a shard's side (actors/shard/balance): what a busy shard
// offers, and chunks handed from one shard's book to another's with their state.

#include <catch2/catch.hpp>

#include "actors/shard/balance.hpp"

namespace rw_unit_shard_balance {

using namespace rw;
using namespace rw::actors;

namespace {

// Weights of one chunk (4 floats) and one-element biases: round-robin over two shards
// puts every weight on shard 0 and every bias on shard 1.
job_spec skewed(optimizer_kind kind = optimizer_kind::sum) {
  job_spec spec;
  spec.name = "skewed";
  spec.num_workers = 2;
  spec.chunk_bytes = 16;
  spec.optimizer.kind = kind;
  spec.tensors = {{"w0", 4}, {"b0", 1}, {"w1", 4}, {"b1", 1}};
  return spec;
}

// The node's shards, for a layer-wise job's setup: these tests run no step.
struct no_peers final : shard_peers {
  size_t size() const override { return 2; }
  void norm(uint32_t, uint32_t, uint32_t, uint64_t, uint32_t, double,
            double) const override {}
  void trust(uint32_t, uint32_t, uint32_t, uint64_t, float) const override {}
};

detail::shard_job make(const job_spec& spec, routing_ptr routes, uint32_t shard) {
  job_setup setup{7,     spec,    std::move(routes),
                  shard, nullptr, std::make_shared<no_peers>()};
  return detail::make_shard_job(setup, nullptr, 0);
}

} // namespace

TEST_CASE("a busy shard offers its heaviest chunks up to the share", "[balance]") {
  auto spec = skewed();
  auto routes = std::make_shared<const runtime::routing_table>(spec, 2);
  detail::shard_book book;
  book.jobs.emplace(7, make(spec, routes, 0));
  auto& job = book.jobs.at(7);
  REQUIRE(job.chunks.size() == 2);
  job.chunks[0].add_load(100);                 // w0
  job.chunks[1].add_load(300);                 // w1
  auto plan = detail::plan_shed(book, 0, 0.5); // at most 200 of 400
  CHECK(plan.job_id == 7);
  CHECK(plan.shard_load == 400);
  REQUIRE(plan.chunks.size() == 1);
  CHECK(plan.chunks[0] == std::array<uint32_t, 2>{0, 0}); // w1 alone is too heavy
  // Loads count again from the plan on.
  auto again = detail::plan_shed(book, 0, 0.5);
  CHECK(again.chunks.empty());
  CHECK(again.why_none.find("no load") != std::string::npos);
}

TEST_CASE("a layer-wise job's chunks stay where they are", "[balance]") {
  auto spec = skewed(optimizer_kind::lamb);
  auto routes = std::make_shared<const runtime::routing_table>(spec, 2);
  detail::shard_book book;
  book.jobs.emplace(7, make(spec, routes, 0));
  book.jobs.at(7).chunks[0].add_load(100);
  auto plan = detail::plan_shed(book, 0, 0.5);
  CHECK(plan.chunks.empty());
  CHECK(plan.why_none.find("can move") != std::string::npos);
  auto next = routes->remapped({{0, 0, 1}});
  auto bias = make(spec, routes, 1);
  CHECK(detail::expect_chunks(bias, 1, next).find("layer-wise") != std::string::npos);
}

TEST_CASE("a chunk moves between shards with its state and what waited for it",
          "[balance]") {
  auto spec = skewed();
  auto routes = std::make_shared<const runtime::routing_table>(spec, 2);
  detail::shard_book from_book, to_book;
  from_book.jobs.emplace(7, make(spec, routes, 0));
  to_book.jobs.emplace(7, make(spec, routes, 1));
  auto& from = from_book.jobs.at(7);
  auto& to = to_book.jobs.at(7);
  const float w1[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  auto& moving = from.chunks[routes->local_index(2, 0)];
  REQUIRE(moving.init(w1) == false); // no init declared: initialized already
  const float* params = moving.params();
  std::copy(w1, w1 + 4, const_cast<float*>(params));
  moving.add_load(42);
  // A push for the moving chunk waiting in the old shard's backlog, and one for a chunk
  // that stays.
  from_book.backlog.emplace(0, chunk_push{7, 1, 2, 0, 0, true, nullptr, nullptr});
  from_book.backlog.emplace(0, chunk_push{7, 1, 0, 0, 0, true, nullptr, nullptr});

  auto next = routes->remapped({{2, 0, 1}});
  // Step 1: routes that take a chunk away from the receiving shard are refused.
  CHECK_FALSE(detail::expect_chunks(to, 1, routes->remapped({{1, 0, 0}})).empty());
  REQUIRE(detail::expect_chunks(to, 1, next).empty());
  CHECK(to.awaits(2, 0));
  CHECK_FALSE(to.awaits(1, 0));
  REQUIRE(to.chunks.size() == 3);
  // A request that comes meanwhile is stashed by the shard (actors/shard/handle_push.cpp).
  to.stash.push_back(
    {detail::shard_job::stashed::a_pull, {}, chunk_pull{7, 0, 2, 0, 1, nullptr}});

  // Step 3: the old shard gives it, with its backlog's push for it.
  auto h = detail::give_chunks(from_book, 7, from, 0, next);
  REQUIRE(h.chunks.size() == 1);
  CHECK(h.chunks[0].tensor == 2);
  CHECK(from.chunks.size() == 1);
  CHECK(from.owned_chunks == 1);
  CHECK(from.routes == next);
  REQUIRE(h.backlog.size() == 1);
  CHECK(h.backlog[0].tensor == 2);
  CHECK(from_book.backlog.size() == 1); // the staying chunk's push stays

  std::string error;
  auto serve = detail::take_chunks(to, h, error);
  CHECK(error.empty());
  CHECK_FALSE(to.awaits(2, 0));
  CHECK(to.incoming.empty());
  CHECK(to.owned_chunks == 3);
  auto& arrived = to.chunks[next->local_index(2, 0)];
  CHECK(arrived.params() == params); // the same memory, kept alive by the new shard
  CHECK(std::equal(w1, w1 + 4, arrived.params()));
  CHECK(arrived.load() == 42);
  CHECK(std::find(to.borrowed.begin(), to.borrowed.end(), from.memory)
        != to.borrowed.end());
  // The old shard's waiting push first, then the stash.
  REQUIRE(serve.size() == 2);
  CHECK(serve[0].kind == detail::shard_job::stashed::a_push);
  CHECK(serve[1].kind == detail::shard_job::stashed::a_pull);
  CHECK(to.stash.empty());
  // A second handoff by the same routes finds nothing expected.
  auto stray = detail::give_chunks(from_book, 7, from, 0, next);
  CHECK(stray.chunks.empty());
}

} // namespace rw_unit_shard_balance
