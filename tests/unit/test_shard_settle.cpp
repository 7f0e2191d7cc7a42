// A layer-wise job (LAMB) settling for a move, through two real shard actors of one
// node: a tensor's chunks sit on both, and its step needs every chunk's norms. Rank 0
// has pushed a chunk on shard A when the move begins, and not yet its chunk on shard B.
// Settled chunk by chunk, B refused that push (its chunk had no step begun), A's step
// waited for B's norms for ever, and the move was given up after 10 s (a CI run: "the
// coordinator did not answer within 10000 ms"). Held first, then settled at the
// tensor's furthest step, both shards finish step 0 and answer.
// (Tagged apart from [chunk_state]: it runs CAF actors, which tests/tsan.sh leaves to
// the ASan run.)

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/chunking.hpp"
#include "tests/support/recording_connection.hpp"

namespace rw_unit_shard_settle {

using namespace rw;
using namespace rw::actors;

namespace {

constexpr uint32_t job_id = 7;

struct two_shards {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  job_spec spec;
  std::shared_ptr<const runtime::routing_table> routes;
  std::vector<chunk_shard_actor> shards;
  std::shared_ptr<testing::recording> conn = std::make_shared<testing::recording>();
  runtime::buffer_pool pool{64, 0};

  two_shards() {
    spec.name = "settle";
    spec.num_workers = 2;
    spec.chunk_bytes = 16; // 4 floats a chunk
    spec.optimizer.kind = optimizer_kind::lamb;
    spec.optimizer.learning_rate = 0.01f;
    spec.tensors = {{"w", 16, false}}; // 4 chunks
    routes = std::make_shared<const runtime::routing_table>(spec, 2);
    for (uint32_t i = 0; i < 2; ++i) {
      shard_settings s;
      s.index = i;
      shards.push_back(spawn_chunk_shard(sys, s, make_shard_book()));
    }
    auto peers = make_shard_peers(shards);
    for (uint32_t i = 0; i < 2; ++i) {
      bool created = false;
      self
        ->request(shards[i], std::chrono::seconds(10), create_atom::value,
                  job_setup{job_id, spec, routes, i, nullptr, peers}, abort_sink{})
        .receive([&](ok_atom) { created = true; }, [](caf::error&) {});
      REQUIRE(created);
    }
  }
  ~two_shards() {
    for (auto& s : shards) {
      self->send_exit(s, caf::exit_reason::user_shutdown);
      self->wait_for(s);
    }
  }

  void push(uint32_t rank, uint32_t chunk, uint64_t clock) {
    auto b = pool.acquire();
    b->size = 16;
    std::fill(b->floats(), b->floats() + 4, 0.25f * float(rank + 1));
    caf::anon_send(shards[routes->shard_of(0, chunk)], push_atom::value,
                   chunk_push{job_id, rank, 0, chunk, clock, true, std::move(b), conn});
  }
  // Waits (up to 10 s) until shard `index` has counted `n` pushes: one that finds
  // messages queued behind it waits in the shard's backlog a moment (priority).
  void counted(uint32_t index, uint64_t n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    uint64_t pushes = 0;
    while (pushes < n && std::chrono::steady_clock::now() < until)
      self->request(shards[index], std::chrono::seconds(10), stats_atom::value)
        .receive([&](shard_stats& st) { pushes = st.pushes; }, [](caf::error&) {});
    REQUIRE(pushes == n);
  }
  // The first chunk on shard `index`.
  uint32_t chunk_on(uint32_t index) const {
    for (uint32_t c = 0; c < routes->layout(0).count(); ++c)
      if (routes->shard_of(0, c) == index)
        return c;
    FAIL("no chunk on shard " << index);
    return 0;
  }
};

} // namespace

TEST_CASE("a layer-wise tensor on two shards settles at the step begun on one of them",
          "[settle_actor]") {
  two_shards n;
  const uint32_t on_a = n.chunk_on(0), on_b = n.chunk_on(1);
  const uint32_t chunks = n.routes->layout(0).count();
  n.push(0, on_a, 0); // rank 0 is in step 0 on shard A only
  n.counted(0, 1);

  // First phase: both shards hold the job's pushes and say how far the tensor got.
  settle_targets targets;
  for (auto& s : n.shards)
    n.self->request(s, std::chrono::seconds(10), hold_atom::value, job_id)
      .receive(
        [&](settle_targets& r) {
          for (auto& [t, v] : r.by_tensor)
            targets.by_tensor[t] = std::max(targets.by_tensor[t], v);
        },
        [](caf::error& err) { FAIL("hold: " << to_string(err)); });
  REQUIRE(targets.by_tensor == std::map<uint32_t, uint64_t>{{0, 1}});

  n.push(0, on_b, 0); // held on B: with the chunk-by-chunk rule, dropped
  // Second phase: both settle at version 1; every rank's step 0 comes in meanwhile.
  auto fence_a = n.self->request(n.shards[0], std::chrono::seconds(10), fence_atom::value,
                                 job_id, targets);
  auto fence_b = n.self->request(n.shards[1], std::chrono::seconds(10), fence_atom::value,
                                 job_id, targets);
  for (uint32_t c = 0; c < chunks; ++c) {
    if (c != on_a && c != on_b)
      n.push(0, c, 0);
    n.push(1, c, 0);
  }
  n.push(0, on_a, 1); // step 1 is not begun anywhere: dropped, not counted
  std::vector<uint64_t> versions;
  auto take = [&](chunk_snapshot& snap) {
    REQUIRE(snap.chunks);
    for (auto& r : *snap.chunks)
      versions.push_back(r.version);
  };
  fence_a.receive(
    take, [](caf::error& err) { FAIL("shard A did not settle: " << to_string(err)); });
  fence_b.receive(
    take, [](caf::error& err) { FAIL("shard B did not settle: " << to_string(err)); });
  CHECK(versions == std::vector<uint64_t>(chunks, 1));
  // Every push of step 0 was answered (push_pull: the chunk at version 1), none of step 1.
  CHECK(n.conn->chunks(2 * chunks).size() == 2 * chunks);
}

} // namespace rw_unit_shard_settle
