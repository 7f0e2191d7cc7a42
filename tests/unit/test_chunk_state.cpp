// The shard's per-chunk BSP logic, without actors or sockets.

#include <algorithm>
#include <numeric>
#include <cstring>

#include <catch2/catch.hpp>

#include "logic/chunk_state.hpp"
#include "runtime/buffer_pool.hpp"

namespace rw_unit_chunk_state {

using rw::actors::detail::chunk_state;
using outcome = chunk_state::outcome;

namespace {

const auto now = std::chrono::steady_clock::now();

rw::runtime::buffer_ref make(rw::runtime::buffer_pool& pool, std::vector<float> values) {
  auto b = pool.acquire();
  std::memcpy(b->floats(), values.data(), values.size() * sizeof(float));
  b->size = values.size() * sizeof(float);
  return b;
}

// A chunk with its own memory, as a shard's arena would give it.
struct owned_chunk {
  std::vector<float> params, m, v;
  chunk_state cs;
  owned_chunk(uint32_t length, uint32_t workers, bool wait_for_init)
    : params(length), m(length), v(length),
      cs(length, workers, params.data(), m.data(), v.data(), wait_for_init) {}
};

rw::optimizer_spec sum_spec() {
  rw::optimizer_spec s;
  s.kind = rw::optimizer_kind::sum;
  return s;
}

} // namespace

TEST_CASE("summation is in rank order whatever the arrival order", "[chunk_state]") {
  // Float addition is not associative: (1e8 + -1e8) + 1 == 1, but (1 + -1e8) + 1e8 == 0.
  const std::vector<std::vector<float>> grads = {
    {1e8f, 3.0f}, {-1e8f, 1e-7f}, {1.0f, 7.0f}};
  float expect[2];
  for (int i = 0; i < 2; ++i)
    expect[i] = (grads[0][i] + grads[1][i]) + grads[2][i];
  REQUIRE(expect[0] == 1.0f);
  std::vector<uint32_t> order{0, 1, 2};
  rw::runtime::buffer_pool pool{8, 0};
  do {
    owned_chunk chunk{2, 3, false};
    auto& cs = chunk.cs;
    for (size_t k = 0; k < order.size(); ++k) {
      auto r = order[k];
      auto res = cs.push(r, 0, make(pool, grads[r]), now);
      CHECK(res == (k + 1 == order.size() ? outcome::step_ready : outcome::counted));
    }
    REQUIRE(cs.step_ready());
    cs.complete_step(sum_spec(), 1.0f, now);
    CHECK(cs.version() == 1);
    CHECK(std::memcmp(cs.params(), expect, sizeof(expect)) == 0);
  } while (std::next_permutation(order.begin(), order.end()));
  // Every buffer went back to the pool.
  CHECK(pool.free_count() == pool.allocated());
}

TEST_CASE("duplicates and clocks too far ahead are refused, one step ahead is held",
          "[chunk_state]") {
  rw::runtime::buffer_pool pool{4, 0};
  owned_chunk chunk{1, 2, false};
  auto& cs = chunk.cs;
  CHECK(cs.push(0, 0, make(pool, {1}), now) == outcome::counted);
  CHECK(cs.push(0, 0, make(pool, {5}), now) == outcome::duplicate);
  CHECK(cs.push(0, 2, make(pool, {5}), now) == outcome::too_far_ahead);
  CHECK(cs.push(0, 1, make(pool, {10}), now) == outcome::counted); // held for clock 1
  CHECK(cs.missing_ranks() == std::vector<uint32_t>{1});
  CHECK(cs.push(1, 0, make(pool, {2}), now) == outcome::step_ready);
  cs.complete_step(sum_spec(), 1.0f, now);
  CHECK(cs.params()[0] == 3.0f);
  CHECK(cs.step_open()); // rank 0's held push opened clock 1
  CHECK(cs.push(0, 0, make(pool, {1}), now) == outcome::duplicate); // clock 0 is past
  CHECK(cs.push(1, 1, make(pool, {20}), now) == outcome::step_ready);
  cs.complete_step(sum_spec(), 1.0f, now);
  CHECK(cs.params()[0] == 30.0f);
  CHECK(cs.version() == 2);
  CHECK(!cs.step_open());
}

TEST_CASE(
  "a layer-wise chunk's settle reach: its version, one more once a step is begun, "
  "two more with the next step held",
  "[chunk_state]") {
  rw::runtime::buffer_pool pool{8, 0};
  std::vector<float> params(1), m(1), v(1), d(1);
  chunk_state cs{1, 2, params.data(), m.data(), v.data(), false, {}, d.data()};
  CHECK(cs.settle_reach() == 0);
  CHECK(cs.push(0, 0, make(pool, {1}), now) == outcome::counted);
  CHECK(cs.settle_reach() == 1); // rank 0 is in step 0: every chunk of the tensor gets it
  CHECK(cs.push(0, 1, make(pool, {2}), now) == outcome::counted); // held for clock 1
  CHECK(cs.settle_reach() == 2);
  CHECK(cs.push(1, 0, make(pool, {3}), now) == outcome::step_ready);
  rw::optimizer_spec lamb;
  lamb.kind = rw::optimizer_kind::lamb;
  lamb.learning_rate = 0.1f;
  cs.prepare_layerwise(lamb, 1.0f); // waits for the tensor's trust ratio
  CHECK(cs.layerwise_pending());
  CHECK(cs.settle_reach() == 2);
  cs.finish_layerwise(lamb, 1.0f, now);
  CHECK(cs.version() == 1);
  CHECK(cs.settle_reach() == 2); // rank 0's held push began step 1
  CHECK(cs.push(1, 1, make(pool, {4}), now) == outcome::step_ready);
  cs.prepare_layerwise(lamb, 1.0f);
  CHECK(cs.settle_reach() == 2);
  cs.finish_layerwise(lamb, 1.0f, now);
  CHECK(cs.version() == 2);
  CHECK(cs.settle_reach() == 2);
  CHECK(cs.settled());
}

TEST_CASE("waiters are answered once their version exists", "[chunk_state]") {
  rw::runtime::buffer_pool pool{4, 0};
  owned_chunk chunk{1, 2, true}; // waits for rank 0's init
  auto& cs = chunk.cs;
  cs.wait({nullptr, 1, 0});       // a pull of version 0
  CHECK(cs.take_ready().empty()); // not initialised yet
  float init = 4.0f;
  REQUIRE(cs.init(&init));
  CHECK_FALSE(cs.init(&init)); // only once
  auto ready = cs.take_ready();
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].rank == 1);
  cs.wait({nullptr, 0, 1}); // push_pull of clock 0 waits for version 1
  cs.wait({nullptr, 1, 1});
  CHECK(cs.push(0, 0, make(pool, {1}), now) == outcome::counted);
  CHECK(cs.take_ready().empty());
  CHECK(cs.push(1, 0, make(pool, {1}), now) == outcome::step_ready);
  cs.complete_step(sum_spec(), 1.0f, now);
  CHECK(cs.take_ready().size() == 2);
  CHECK(cs.take_all().empty());
}

TEST_CASE("has_pushed and needs describe what a step still waits for", "[chunk_state]") {
  rw::runtime::buffer_pool pool{4, 0};
  owned_chunk chunk{1, 3, false};
  auto& cs = chunk.cs;
  CHECK_FALSE(cs.needs(2)); // nothing open yet
  cs.push(0, 0, make(pool, {1}), now);
  CHECK(cs.needs(2));
  CHECK(cs.has_pushed(0, 0));
  CHECK_FALSE(cs.has_pushed(2, 0));
  CHECK_FALSE(cs.has_pushed(2, 1));
}

namespace {

// A read-only payload over memory the test owns, as a worker's shared memory reaches a
// shard; counts its releases.
class read_only final : public rw::runtime::payload {
public:
  read_only(std::vector<float>& v, int& released)
    : payload(reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(float), false),
      released_(released) {
    size = v.size() * sizeof(float);
  }

private:
  void recycle() noexcept override {
    ++released_;
    delete this;
  }
  int& released_;
};

} // namespace

TEST_CASE("read-only pushes are summed when the step is complete, bitwise the same",
          "[chunk_state]") {
  for (uint32_t workers : {1u, 2u, 3u, 4u, 5u}) {
    std::vector<std::vector<float>> grads;
    for (uint32_t r = 0; r < workers; ++r) // magnitudes that make order visible
      grads.push_back({r % 2 ? -1e8f : 1e8f, 1.0f + r, 3e-8f * r});
    std::vector<float> expect = grads[0];
    for (uint32_t r = 1; r < workers; ++r)
      for (size_t i = 0; i < expect.size(); ++i)
        expect[i] += grads[r][i];
    std::vector<uint32_t> order(workers);
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end()); // worst case: rank 0 last
    owned_chunk chunk{3, workers, false};
    int released = 0;
    for (auto r : order)
      chunk.cs.push(r, 0, rw::runtime::buffer_ref{new read_only(grads[r], released)},
                    now);
    REQUIRE(chunk.cs.step_ready());
    chunk.cs.complete_step(sum_spec(), 1.0f, now);
    INFO(workers << " workers");
    CHECK(std::memcmp(chunk.cs.params(), expect.data(), 3 * sizeof(float)) == 0);
    CHECK(released == static_cast<int>(workers)); // every view given back
  }
}

} // namespace rw_unit_chunk_state

namespace rw_unit_chunk_state {

TEST_CASE("a saved optimizer state loads into a chunk before its first step only",
          "[chunk_state]") {
  rw::runtime::buffer_pool pool{4, 0};
  std::vector<float> params(2), m(2);
  chunk_state cs{2, 2, params.data(), m.data(), nullptr, true};
  CHECK(cs.state_arrays() == 1);
  CHECK(cs.state_array(1) == nullptr);
  CHECK_THAT(cs.cannot_load(5), Catch::Contains("no initial values yet"));
  const float init[2] = {1.0f, 2.0f};
  REQUIRE(cs.init(init));
  CHECK(cs.cannot_load(5).empty());
  const float saved[2] = {0.25f, -0.5f};
  CHECK(cs.load_array(0, saved));
  CHECK(!cs.load_array(1, saved)); // momentum keeps one array
  CHECK(m == std::vector<float>{0.25f, -0.5f});
  cs.load_version(5);
  CHECK(cs.version() == 5);
  CHECK(cs.cannot_load(5).empty()); // sent again: the same clock
  CHECK_THAT(cs.cannot_load(4), Catch::Contains("it is at version 5"));
  // The ranks go on from the loaded clock: a push for an earlier one is a duplicate.
  CHECK(cs.push(0, 4, make(pool, {1, 1}), now) == outcome::duplicate);
  CHECK(cs.next_clock(1) == 5);
  CHECK(cs.push(0, 5, make(pool, {1, 1}), now) == outcome::counted);
  CHECK_THAT(cs.cannot_load(5), Catch::Contains("a step is in it"));
  CHECK(cs.push(1, 5, make(pool, {1, 1}), now) == outcome::step_ready);
  rw::optimizer_spec momentum;
  momentum.kind = rw::optimizer_kind::momentum;
  momentum.learning_rate = 0.5f;
  momentum.momentum = 0.5f;
  cs.complete_step(momentum, 1.0f, now);
  CHECK(cs.version() == 6);
  CHECK_THAT(cs.cannot_load(5), Catch::Contains("it is at version 6"));
  // m = 0.5 m + g (g = 2, the sum): the loaded momentum took part.
  CHECK(m[0] == 0.5f * 0.25f + 2.0f);
}

} // namespace rw_unit_chunk_state
