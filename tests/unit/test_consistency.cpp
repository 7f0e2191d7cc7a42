// Consistency models as properties over random schedules: W simulated workers push_pull
// one chunk in a random interleaving (a worker waiting for its answer cannot push), for
// several seeds. SSP(s) never serves a read staler than s; async never loses an update;
// BSP stays bitwise the rank-order sum.

#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "logic/chunk_state.hpp"
#include "runtime/buffer_pool.hpp"

namespace rw_unit_consistency {

using rw::consistency_spec;
using rw::actors::detail::chunk_state;
using rw::actors::detail::waiter;

namespace {

const auto now = std::chrono::steady_clock::now();

struct run_result {
  uint64_t max_staleness = 0;
  std::vector<uint32_t> pushes; // per worker
  std::vector<float> params;    // final
  uint64_t version = 0;
  uint32_t max_lead = 0; // largest clock gap between two workers ever seen
};

// Integer-valued gradients so that any sum of them is exact in float.
float gradient(uint32_t rank, uint32_t clock, uint32_t i) {
  return static_cast<float>((rank * 7 + clock * 3 + i) % 11) - 5.0f;
}

run_result simulate(consistency_spec model, uint32_t workers, uint32_t clocks,
                    uint32_t seed) {
  constexpr uint32_t len = 4;
  std::vector<float> params(len), m(len), v(len);
  chunk_state cs{len, workers, params.data(), m.data(), v.data(), false, model};
  rw::runtime::buffer_pool pool{len * sizeof(float), 0};
  rw::optimizer_spec sum;
  sum.kind = rw::optimizer_kind::sum;
  std::mt19937 rng{seed};
  run_result out;
  out.pushes.assign(workers, 0);
  std::vector<bool> waiting(workers, false);
  for (int guard = 0; guard < 100000; ++guard) {
    std::vector<uint32_t> runnable;
    for (uint32_t r = 0; r < workers; ++r)
      if (!waiting[r] && out.pushes[r] < clocks)
        runnable.push_back(r);
    if (runnable.empty())
      break;
    auto r = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng)];
    auto clock = out.pushes[r];
    auto buf = pool.acquire();
    for (uint32_t i = 0; i < len; ++i)
      buf->floats()[i] = gradient(r, clock, i);
    buf->size = len * sizeof(float);
    REQUIRE(cs.push(r, clock, buf, now) != chunk_state::outcome::duplicate);
    cs.wait(cs.push_waiter(nullptr, r, clock));
    waiting[r] = true;
    ++out.pushes[r];
    while (cs.step_ready())
      cs.complete_step(sum, 1.0f, now);
    for (auto& w : cs.take_ready()) {
      out.max_staleness = std::max(out.max_staleness, cs.staleness(w));
      waiting[w.rank] = false;
    }
    auto [lo, hi] = std::minmax_element(out.pushes.begin(), out.pushes.end());
    out.max_lead = std::max(out.max_lead, *hi - *lo);
  }
  out.params = params;
  out.version = cs.version();
  return out;
}

} // namespace

TEST_CASE("SSP never serves a read staler than its bound", "[consistency]") {
  for (uint32_t s : {0u, 1u, 2u, 5u}) {
    for (uint32_t seed = 1; seed <= 12; ++seed) {
      consistency_spec model{consistency_spec::ssp, s};
      auto r = simulate(model, 4, 30, seed);
      INFO("ssp:" << s << " seed " << seed);
      CHECK(r.max_staleness <= s);
      CHECK(r.max_lead <= s + 1); // a worker can be at most one push beyond the bound
      for (auto p : r.pushes)
        CHECK(p == 30); // nobody deadlocks
    }
  }
}

TEST_CASE("async applies every push, loses none, and never waits", "[consistency]") {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    auto r = simulate({consistency_spec::async, 0}, 5, 25, seed);
    INFO("seed " << seed);
    CHECK(r.version == 5 * 25);
    for (uint32_t i = 0; i < 4; ++i) {
      float expect = 0;
      for (uint32_t rank = 0; rank < 5; ++rank)
        for (uint32_t c = 0; c < 25; ++c)
          expect += gradient(rank, c, i); // exact: small integers
      CHECK(r.params[i] == expect);
    }
  }
}

TEST_CASE("a seen SSP staleness can reach its bound (the bound is not vacuous)",
          "[consistency]") {
  uint64_t seen = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed)
    seen = std::max(seen,
                    simulate({consistency_spec::ssp, 2}, 4, 30, seed).max_staleness);
  CHECK(seen == 2);
  uint64_t async_seen = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed)
    async_seen = std::max(
      async_seen, simulate({consistency_spec::async, 0}, 4, 30, seed).max_staleness);
  CHECK(async_seen > 2); // async has no bound
}

TEST_CASE("BSP under random schedules stays the rank-order sum of the last clock",
          "[consistency]") {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    auto r = simulate({consistency_spec::bsp, 0}, 3, 10, seed);
    CHECK(r.version == 10);
    CHECK(r.max_staleness == 0);
    for (uint32_t i = 0; i < 4; ++i) {
      float expect = (gradient(0, 9, i) + gradient(1, 9, i)) + gradient(2, 9, i);
      CHECK(r.params[i] == expect);
    }
  }
}

TEST_CASE("consistency specs parse, and bad ones say why", "[consistency]") {
  CHECK(rw::parse_consistency("bsp").model == consistency_spec::bsp);
  auto s = rw::parse_consistency("ssp:2");
  CHECK(s.model == consistency_spec::ssp);
  CHECK(s.staleness == 2);
  CHECK(rw::parse_consistency("async").model == consistency_spec::async);
  CHECK_THROWS_WITH(rw::parse_consistency("ssp:-1"), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(rw::parse_consistency("ssp:"), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(rw::parse_consistency("ssp:x"), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(rw::parse_consistency("eventual"),
                    Catch::Contains("bsp, ssp:S or async"));
  CHECK(rw::to_string(s) == "ssp:2");
  rw::job_spec a, b;
  a.name = b.name = "j";
  a.tensors = b.tensors = {{"t", 4, false}};
  b.consistency = s;
  CHECK_THAT(rw::describe_mismatch(a, b),
             Catch::Contains("runs bsp, hello asks for ssp:2"));
}

TEST_CASE("SSP pushes must come in clock order", "[consistency]") {
  std::vector<float> p(1), m(1), v(1);
  chunk_state cs{1, 2, p.data(), m.data(), v.data(), false, {consistency_spec::ssp, 1}};
  rw::runtime::buffer_pool pool{4, 0};
  auto buf = [&] {
    auto b = pool.acquire();
    b->floats()[0] = 1.0f;
    b->size = 4;
    return b;
  };
  CHECK(cs.push(0, 1, buf(), now) == chunk_state::outcome::too_far_ahead);
  CHECK(cs.push(0, 0, buf(), now) == chunk_state::outcome::step_ready);
  rw::optimizer_spec sum;
  cs.complete_step(sum, 1.0f, now);
  CHECK(cs.push(0, 0, buf(), now) == chunk_state::outcome::duplicate);
  CHECK(cs.version() == 1);
}

TEST_CASE("priority servicing answers the worker furthest behind first",
          "[consistency]") {
  std::vector<float> p(1), m(1), v(1);
  chunk_state cs{1, 3, p.data(), m.data(), v.data(), false, {consistency_spec::async, 0}};
  // Three workers wait at once: rank 2 at clock 9, rank 0 at clock 3 (the laggard),
  // rank 1 at clock 6, in that arrival order.
  cs.wait({nullptr, 2, 0, 0, 10});
  cs.wait({nullptr, 0, 0, 0, 4});
  cs.wait({nullptr, 1, 0, 0, 7});
  auto fifo_copy = cs; // the same queue, served without priority
  auto by_lag = cs.take_ready(true);
  REQUIRE(by_lag.size() == 3);
  CHECK(by_lag[0].rank == 0);
  CHECK(by_lag[1].rank == 1);
  CHECK(by_lag[2].rank == 2);
  auto fifo = fifo_copy.take_ready(false);
  REQUIRE(fifo.size() == 3);
  CHECK(fifo[0].rank == 2); // arrival order
  CHECK(fifo[1].rank == 0);
}

} // namespace rw_unit_consistency
