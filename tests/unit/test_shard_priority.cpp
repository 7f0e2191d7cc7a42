// Priority servicing through a real shard actor: a poller's batch of pushes (one round
// of its endpoint, several workers at different clocks) is served lowest clock first,
// or in arrival order with --no-priority (shard_settings::priority = false). The
// answers leave in service order on one connection, so their order is the shard's.
// (Tagged apart from [consistency]: it runs a CAF actor, which tests/tsan.sh leaves to
// the ASan run.)

#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/chunking.hpp"
#include "tests/support/recording_connection.hpp"

namespace rw_unit_shard_priority {

using namespace rw;
using namespace rw::actors;

namespace {

using testing::recording;

// Three workers of an async job, each pushing its own chunk of "w" (4 floats each) at
// clocks 5, 1 and 3, in one batch as a poller's round delivers them; returns the chunks
// in the order the shard answered them.
std::vector<uint32_t> serve_batch(bool priority) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  job_spec spec;
  spec.name = "order";
  spec.num_workers = 3;
  spec.chunk_bytes = 16;
  spec.optimizer.kind = optimizer_kind::sum;
  spec.consistency = {consistency_spec::async, 0};
  spec.tensors = {{"w", 12, false}};
  shard_settings s;
  s.priority = priority;
  auto shard = spawn_chunk_shard(sys, s, make_shard_book());
  auto routes = std::make_shared<const runtime::routing_table>(spec, 1);
  caf::scoped_actor self{sys};
  bool created = false;
  self
    ->request(shard, std::chrono::seconds(10), create_atom::value,
              job_setup{9, spec, routes, 0, nullptr, {}}, abort_sink{})
    .receive([&](ok_atom) { created = true; }, [](caf::error&) {});
  std::vector<uint32_t> order;
  if (created) {
    auto conn = std::make_shared<recording>();
    runtime::buffer_pool pool{16, 0};
    const uint64_t clocks[3] = {5, 1, 3};
    std::vector<chunk_push> batch;
    for (uint32_t rank = 0; rank < 3; ++rank) {
      auto b = pool.acquire();
      b->size = 16;
      std::fill(b->floats(), b->floats() + 4, 1.0f);
      batch.push_back(
        chunk_push{9, rank, 0, rank, clocks[rank], true, std::move(b), conn});
    }
    caf::anon_send(shard, push_atom::value, std::move(batch));
    order = conn->chunks(3);
  }
  self->send_exit(shard, caf::exit_reason::user_shutdown);
  self->wait_for(shard);
  return order;
}

} // namespace

TEST_CASE("a shard serves a batch lowest clock first, or in arrival order without "
          "priority",
          "[consistency_actor]") {
  CHECK(serve_batch(true) == std::vector<uint32_t>{1, 2, 0});  // clocks 1, 3, 5
  CHECK(serve_batch(false) == std::vector<uint32_t>{0, 1, 2}); // as they came
}

} // namespace rw_unit_shard_priority
