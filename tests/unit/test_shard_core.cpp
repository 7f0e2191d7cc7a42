// The chunk shard's logic without an actor system (actors/shard/core.hpp): requests are
// calls, answers are frames on a recording connection, and what the shard sends
// elsewhere goes through fakes of its interfaces (actors/shard/outbox.hpp): its own
// mailbox (work and flush tokens), the node's other shards (a layer-wise step's norms
// and trust ratio), a job's coordinator (steps, checkpoints, timeouts) and the replies
// of requests that wait (checkpoints, a move's fence).

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/shard/core.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/chunking.hpp"

namespace rw_unit_shard_core {

using namespace rw;
using namespace rw::actors;
using protocol::frame_kind;

namespace {

// A connection that keeps every frame it is given: its header and its payload's floats.
class frames final : public transports::connection {
public:
  struct frame {
    protocol::frame_header h;
    std::vector<float> values;
  };
  bool send(const protocol::frame_header& h, const iovec* payload, int count) override {
    frame f{h, {}};
    for (int i = 0; i < count; ++i) {
      auto* p = static_cast<const float*>(payload[i].iov_base);
      f.values.insert(f.values.end(), p, p + payload[i].iov_len / sizeof(float));
    }
    got.push_back(std::move(f));
    return true;
  }
  void close() override {}
  bool is_open() const noexcept override { return true; }
  const std::string& peer() const noexcept override { return name_; }

  std::vector<frame> got;

private:
  std::string name_ = "frames";
};

struct fake_outbox final : shard_outbox {
  bool busy = false; // other requests wait in the mailbox
  int work_tokens = 0;
  int flush_tokens = 0;
  bool idle() override { return !busy; }
  void work_later() override { ++work_tokens; }
  void flush_later() override { ++flush_tokens; }
};

struct fake_reports final : job_reports {
  std::vector<std::string> failures;
  std::vector<uint64_t> checkpoints; // clocks
  std::vector<uint64_t> steps;       // clocks
  void failed(uint32_t, errc, const std::string& why) override {
    failures.push_back(why);
  }
  void checkpointed(uint32_t, uint64_t clock, chunk_snapshot) override {
    checkpoints.push_back(clock);
  }
  void stepped(uint32_t, uint32_t, uint64_t clock) override { steps.push_back(clock); }
};

struct fake_reply final : snapshot_reply {
  std::optional<chunk_snapshot> snap;
  errc code = errc::ok;
  std::string why;
  void deliver(chunk_snapshot s) override { snap = std::move(s); }
  void fail(errc c, const std::string& w) override {
    code = c;
    why = w;
  }
};

struct fake_peers final : shard_peers {
  struct norm_msg {
    uint32_t to, tensor, chunk;
    uint64_t version;
  };
  struct trust_msg {
    uint32_t to, tensor;
    uint64_t version;
    float trust;
  };
  std::vector<norm_msg> norms;
  std::vector<trust_msg> trusts;
  size_t size() const override { return 1; }
  void norm(uint32_t to, uint32_t, uint32_t tensor, uint64_t version, uint32_t chunk,
            double, double) const override {
    const_cast<fake_peers*>(this)->norms.push_back({to, tensor, chunk, version});
  }
  void trust(uint32_t to, uint32_t, uint32_t tensor, uint64_t version,
             float trust) const override {
    const_cast<fake_peers*>(this)->trusts.push_back({to, tensor, version, trust});
  }
};

constexpr uint32_t job_id = 7;

// One shard (index 0, not pinned) holding job 7: `workers` ranks, one tensor "w" of 4
// floats in one chunk, BSP, `kind`.
struct one_shard {
  explicit one_shard(optimizer_kind kind, uint32_t workers = 2,
                     std::chrono::milliseconds step_timeout = std::chrono::seconds(60),
                     std::chrono::milliseconds slow_step = std::chrono::seconds(1)) {
    shard_settings s;
    s.step_timeout = step_timeout;
    s.slow_step = slow_step;
    core = std::make_unique<shard_core>(s, std::make_shared<detail::shard_book>(), out);
    core->start();
    job_spec spec;
    spec.name = "core";
    spec.num_workers = workers;
    spec.chunk_bytes = 16;
    spec.optimizer.kind = kind;
    spec.optimizer.learning_rate = 0.5f;
    spec.tensors = {{"w", 4, false}};
    job_setup setup{
      job_id, spec,    std::make_shared<const runtime::routing_table>(spec, 1),
      0,      nullptr, peers};
    refused = core->create(setup, reports);
  }

  // Rank `rank`'s gradient for `clock`, every element `value`; push_pull unless `ack`.
  void push(uint32_t rank, uint64_t clock, float value, bool ack = false) {
    auto b = pool.acquire();
    b->size = 16;
    std::fill(b->floats(), b->floats() + 4, value);
    chunk_push p{job_id, rank, 0, 0, clock, !ack, std::move(b), conn};
    core->push(p);
  }

  std::vector<frames::frame> of_kind(frame_kind k) const {
    std::vector<frames::frame> out;
    for (auto& f : conn->got)
      if (f.h.kind == k)
        out.push_back(f);
    return out;
  }

  fake_outbox out;
  std::shared_ptr<fake_reports> reports = std::make_shared<fake_reports>();
  std::shared_ptr<fake_peers> peers = std::make_shared<fake_peers>();
  std::unique_ptr<shard_core> core;
  shard_refusal refused;
  runtime::buffer_pool pool{16, 0};
  std::shared_ptr<frames> conn = std::make_shared<frames>();
};

} // namespace

TEST_CASE("shard_core: a BSP step runs once every rank is in, each push_pull answered "
          "with the sum, the coordinator told the clock",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum};
  REQUIRE(!s.refused);
  s.push(0, 0, 1.0f);
  CHECK(s.conn->got.empty()); // rank 1 is missing: no step yet
  CHECK(s.reports->steps.empty());
  s.push(1, 0, 2.0f);
  auto updates = s.of_kind(frame_kind::update);
  REQUIRE(updates.size() == 2);
  for (auto& u : updates) {
    CHECK(u.h.clock == 1); // version 1
    CHECK(u.values == std::vector<float>(4, 3.0f));
  }
  CHECK(updates[0].h.rank != updates[1].h.rank);
  CHECK(s.reports->steps == std::vector<uint64_t>{1});
  CHECK(s.out.work_tokens == 0); // nothing waited: served at once

  // A repeat of a counted push is answered as the first was, not counted again.
  s.push(0, 0, 100.0f);
  updates = s.of_kind(frame_kind::update);
  REQUIRE(updates.size() == 3);
  CHECK(updates[2].values == std::vector<float>(4, 3.0f));
  CHECK(s.core->stats().duplicates == 1);
}

TEST_CASE("shard_core: with other requests waiting, a push waits in the backlog behind a "
          "work token, served lowest clock first",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum, 1};
  REQUIRE(!s.refused);
  s.out.busy = true;
  s.push(0, 0, 1.0f, true);
  CHECK(s.out.work_tokens == 1);
  CHECK(s.conn->got.empty());
  CHECK(s.core->stats().queued == 1);
  s.out.busy = false;
  s.core->work();
  REQUIRE(s.of_kind(frame_kind::ack).size() == 1);
  CHECK(s.core->stats().queued == 0);
}

TEST_CASE("shard_core: a checkpoint at a clock the chunk has not reached is answered "
          "right after its step, an unknown job's is refused",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum, 1};
  REQUIRE(!s.refused);
  auto now = std::make_shared<fake_reply>();
  s.core->checkpoint(job_id, 0, now);
  REQUIRE(now->snap);
  CHECK(now->snap->chunks->size() == 1);
  auto later = std::make_shared<fake_reply>();
  s.core->checkpoint(job_id, 1, later);
  CHECK(!later->snap);
  CHECK(later->code == errc::ok);
  s.push(0, 0, 4.0f);
  REQUIRE(later->snap);
  REQUIRE(later->snap->chunks->size() == 1);
  auto unknown = std::make_shared<fake_reply>();
  s.core->checkpoint(job_id + 1, 0, unknown);
  CHECK(unknown->code == errc::unknown_job);
  CHECK(!unknown->snap);
}

TEST_CASE("shard_core: a layer-wise step sends its norms to the tensor's home shard and "
          "ends on the trust ratio",
          "[shard_core]") {
  one_shard s{optimizer_kind::lamb, 1};
  REQUIRE(!s.refused);
  s.push(0, 0, 1.0f);
  REQUIRE(s.peers->norms.size() == 1); // to shard 0: this one is the home
  CHECK(s.peers->norms[0].to == 0);
  CHECK(s.peers->norms[0].version == 0);
  CHECK(s.of_kind(frame_kind::update).empty()); // the step waits for the ratio
  s.core->norm(job_id, 0, 0, 0, 1.0, 1.0);      // as the home receives it
  REQUIRE(s.peers->trusts.size() == 1);
  auto t = s.peers->trusts[0];
  s.core->trust(job_id, t.tensor, t.version, t.trust);
  auto updates = s.of_kind(frame_kind::update);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].h.clock == 1);
}

TEST_CASE("shard_core: a step that waits past the step timeout is reported to the job's "
          "coordinator once",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum, 2, std::chrono::milliseconds(1)};
  REQUIRE(!s.refused);
  s.push(0, 0, 1.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.core->tick();
  s.core->tick();
  REQUIRE(s.reports->failures.size() == 1);
  CHECK_THAT(s.reports->failures[0], Catch::Contains("ranks [1]"));
}

TEST_CASE("shard_core: a rank that comes late each step has the largest lateness in the "
          "job's counts, and a step waiting past --slow-step-ms names its missing rank",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum, 3, std::chrono::seconds(60),
              std::chrono::milliseconds(20)};
  REQUIRE(!s.refused);
  for (uint64_t clock = 0; clock < 4; ++clock) { // the first is not folded in
    s.push(0, clock, 1.0f);
    s.push(2, clock, 1.0f);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.push(1, clock, 1.0f); // rank 1 comes 10 ms after the others
  }
  auto counts = s.core->counters(job_id);
  REQUIRE(counts.size() == 3);
  CHECK(counts[1].late_steps == 3);
  CHECK(counts[1].late_recent_ns >= 10'000'000);
  CHECK(counts[1].late_last_ns >= 10'000'000);
  CHECK(counts[1].late_max_ns >= counts[1].late_recent_ns);
  for (uint32_t r : {0u, 2u}) {
    CHECK(counts[r].late_steps == 3);
    CHECK(counts[r].late_recent_ns < counts[1].late_recent_ns / 2);
  }
  CHECK(counts[1].waited_ns == 0); // no step waits now

  // Step 4: ranks 0 and 2 are in, rank 1 stops. Past the threshold it is named.
  s.push(0, 4, 1.0f);
  s.push(2, 4, 1.0f);
  CHECK(s.core->counters(job_id)[1].missing_chunks == 0); // not yet past 20 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  counts = s.core->counters(job_id);
  CHECK(counts[1].missing_chunks == 1);
  CHECK(counts[1].waited_ns >= 20'000'000);
  CHECK(counts[0].missing_chunks == 0);
  CHECK(counts[2].waited_ns == 0);
  s.core->tick(); // logs it once (the log line: tests/integration/test_stragglers.cpp)
  s.push(1, 4, 1.0f);
  counts = s.core->counters(job_id);
  CHECK(counts[1].missing_chunks == 0);
  CHECK(counts[1].late_steps == 4);
  CHECK(counts[1].late_last_ns >= 30'000'000);
}

TEST_CASE("shard_core: requests about a job the shard does not hold are refused, naming "
          "it, a frame for it is answered with an error",
          "[shard_core]") {
  one_shard s{optimizer_kind::sum};
  REQUIRE(!s.refused);
  settle_targets reach;
  auto r = s.core->hold(job_id + 1, reach);
  CHECK(r.code == errc::unknown_job);
  CHECK_THAT(r.why, Catch::Contains("no live job 8"));
  s.core->drop(job_id, errc::unknown_job, "the job finished");
  s.push(0, 1, 1.0f);
  auto errors = s.of_kind(frame_kind::error);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].h.job_id == job_id);
}

} // namespace rw_unit_shard_core
