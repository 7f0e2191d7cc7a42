// The answers a worker awaits (worker/answer_slots.hpp), without sockets or actors: an
// operation completes once each chunk is answered, each chunk counts once, late answers
// are refused, an outcome waits for the payloads still landing in the caller's buffer,
// mirrored pushes wait for the replicas' acks, the push window's wake-up, and
// subscriptions announce each whole version once. The last case arms and answers from
// two threads, as the proxy and the receiver do (run under ThreadSanitizer too).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/answer_slots.hpp"

namespace rw_unit_answer_slots {

using namespace rw;
using namespace rw::actors;

namespace {

// What the proxy is told, in order.
class recorded final : public link_events {
public:
  struct event {
    std::string what;
    uint32_t tensor;
    uint64_t seq;
    errc code = errc::ok;
  };
  void done(uint32_t tensor, uint64_t seq) override { add({"done", tensor, seq}); }
  void failed(uint32_t tensor, uint64_t seq, errc code, std::string) override {
    add({"failed", tensor, seq, code});
  }
  void lost(errc, std::string) override { add({"lost", 0, 0}); }
  void resend(uint32_t, uint32_t) override {}
  void reroute(uint32_t, bool) override {}
  void answered(uint32_t tensor, uint64_t seq) override {
    add({"answered", tensor, seq});
  }

  std::vector<event> take() {
    std::lock_guard<std::mutex> guard{mtx_};
    auto out = std::move(events_);
    events_.clear();
    return out;
  }
  // Waits until `seq` on `tensor` was done or failed (bounded).
  bool wait_outcome(uint32_t tensor, uint64_t seq) {
    std::unique_lock<std::mutex> lock{mtx_};
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (auto& e : outcomes_)
        if (e.tensor == tensor && e.seq == seq)
          return true;
      return false;
    });
  }

private:
  void add(event e) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (e.what == "done" || e.what == "failed")
      outcomes_.push_back(e);
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<event> events_, outcomes_;
};

struct fixture {
  std::shared_ptr<recorded> events = std::make_shared<recorded>();
  answer_slots slots{{4, 2}}; // tensor 0: 4 chunks, tensor 1: 2
  fixture() { slots.set_events(events); }
  // An update of `chunk` at `clock`, landed and counted as the receiver does.
  answer_verdict update(uint32_t tensor, uint32_t chunk, uint64_t clock,
                        uint32_t staleness = 0) {
    float* dst = nullptr;
    auto v = slots.begin(tensor, chunk, true, false, clock, true, dst);
    if (v == answer_verdict::land)
      slots.answered(tensor, chunk, staleness, true, true);
    return v;
  }
};

} // namespace

TEST_CASE("an armed pull is done once every chunk is answered, each chunk once",
          "[answer_slots]") {
  fixture f;
  std::vector<float> out(4096);
  f.slots.arm(0, armed_op{7, true, out.data(), 3});
  float* dst = nullptr;
  CHECK(f.slots.begin(0, 1, true, false, 3, true, dst) == answer_verdict::land);
  CHECK(dst == out.data());
  f.slots.answered(0, 1, 2, true, true);
  CHECK(f.slots.chunk_arrived(0, 1));
  CHECK_FALSE(f.slots.chunk_arrived(0, 0));
  // The same chunk again (a re-sent request's answer) counts nothing.
  CHECK(f.update(0, 1, 4) == answer_verdict::land);
  CHECK(f.update(0, 0, 3, 5) == answer_verdict::land);
  CHECK(f.update(0, 2, 3) == answer_verdict::land);
  CHECK(f.events->take().empty());
  CHECK(f.update(0, 3, 3) == answer_verdict::land);
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK(told[0].what == "done");
  CHECK(told[0].seq == 7);
  CHECK(f.slots.last_staleness(0) == 5);
  CHECK(f.slots.last_changed(0) == 4);
  // Disarmed: a later answer belongs to nothing.
  CHECK(f.update(0, 3, 3) == answer_verdict::stale);
  CHECK(f.events->take().empty());
}

TEST_CASE("answers that belong to no armed operation are refused", "[answer_slots]") {
  fixture f;
  float* dst = nullptr;
  CHECK(f.slots.begin(0, 0, true, false, 1, true, dst) == answer_verdict::stale);
  std::vector<float> out(4096);
  f.slots.arm(0, armed_op{1, true, out.data(), 5});
  // An update older than the version asked for; an ack where updates are awaited.
  CHECK(f.slots.begin(0, 0, true, false, 4, true, dst) == answer_verdict::stale);
  CHECK(f.slots.begin(0, 0, false, false, 5, true, dst) == answer_verdict::stale);
  // The right update with the wrong payload size.
  CHECK(f.slots.begin(0, 0, true, false, 5, false, dst) == answer_verdict::bad_length);
  // Past the tensors and chunks there are.
  CHECK(f.slots.begin(2, 0, true, false, 5, true, dst) == answer_verdict::stale);
  CHECK(f.slots.begin(1, 2, true, false, 5, true, dst) == answer_verdict::stale);
  // A push waits for acks of exactly its clock.
  f.slots.arm(1, armed_op{2, false, nullptr, 9});
  CHECK(f.slots.begin(1, 0, false, false, 8, true, dst) == answer_verdict::stale);
  CHECK(f.slots.begin(1, 0, false, false, 9, true, dst) == answer_verdict::ack);
  f.slots.answered(1, 0, 0, false, false);
  CHECK(f.slots.begin(1, 1, false, false, 9, true, dst) == answer_verdict::ack);
  f.slots.answered(1, 1, 0, false, false);
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK((told[0].what == "done" && told[0].tensor == 1 && told[0].seq == 2));
  CHECK(f.slots.last_changed(1) == 0);
}

TEST_CASE("a pull of changes counts an unchanged ack of the version before",
          "[answer_slots]") {
  fixture f;
  std::vector<float> out(2048);
  f.slots.arm(1, armed_op{3, true, out.data(), 6, true});
  float* dst = nullptr;
  CHECK(f.slots.begin(1, 0, false, true, 5, true, dst) == answer_verdict::ack);
  f.slots.answered(1, 0, 0, false, false);
  CHECK(f.update(1, 1, 6) == answer_verdict::land);
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK(told[0].what == "done");
  CHECK(f.slots.last_changed(1) == 1);
  // Without changes_only an unchanged ack answers nothing.
  f.slots.arm(1, armed_op{4, true, out.data(), 6});
  CHECK(f.slots.begin(1, 0, false, true, 5, true, dst) == answer_verdict::stale);
}

TEST_CASE("an outcome decided while a payload lands waits for it", "[answer_slots]") {
  fixture f;
  std::vector<float> out(4096);
  f.slots.arm(0, armed_op{5, true, out.data(), 1});
  float* dst = nullptr;
  REQUIRE(f.slots.begin(0, 2, true, false, 1, true, dst) == answer_verdict::land);
  // Another connection's error fails the operation meanwhile: the proxy is told only
  // once chunk 2's payload is in, and that chunk is not counted for anything.
  CHECK(f.slots.fail(0, errc::timeout, "slow"));
  CHECK(f.events->take().empty());
  CHECK_FALSE(f.slots.fail(0, errc::timeout, "again")); // nothing armed any more
  f.slots.answered(0, 2, 0, true, true);
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK((told[0].what == "failed" && told[0].seq == 5 && told[0].code == errc::timeout));
  // A connection that closed mid-payload releases its landing the same way.
  f.slots.arm(0, armed_op{6, true, out.data(), 1});
  REQUIRE(f.slots.begin(0, 0, true, false, 1, true, dst) == answer_verdict::land);
  CHECK(f.slots.fail(0, errc::io_error, "gone"));
  CHECK(f.events->take().empty());
  f.slots.landed(0);
  told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK((told[0].what == "failed" && told[0].seq == 6));
}

TEST_CASE("a mirrored push waits for its replicas' acks, until the ring drops them",
          "[answer_slots]") {
  fixture f;
  // Chunks 0 and 2 have replicas.
  f.slots.arm(0, armed_op{9, false, nullptr, 4}, {1, 0, 1, 0});
  for (uint32_t c = 0; c < 4; ++c) {
    float* dst = nullptr;
    REQUIRE(f.slots.begin(0, c, false, false, 4, true, dst) == answer_verdict::ack);
    f.slots.answered(0, c, 0, false, false);
  }
  CHECK(f.events->take().empty());
  CHECK_FALSE(f.slots.chunk_arrived(0, 0));
  CHECK(f.slots.chunk_arrived(0, 1));
  f.slots.replica_acked(0, 0, 3); // another clock's: not this push's
  f.slots.replica_acked(0, 0, 4);
  f.slots.replica_acked(0, 0, 4); // a repeat
  CHECK(f.slots.chunk_arrived(0, 0));
  CHECK(f.events->take().empty());
  // The ring changed: chunk 2 has no replica any more.
  f.slots.replicas_changed([](uint32_t t, uint32_t c) { return !(t == 0 && c == 2); });
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK((told[0].what == "done" && told[0].seq == 9));
}

TEST_CASE("the push window is woken once its chunks are answered", "[answer_slots]") {
  fixture f;
  f.slots.arm(0, armed_op{11, false, nullptr, 2});
  CHECK_FALSE(f.slots.wake_when_answered(0, 11, 2));
  f.update(0, 0, 2); // an update where acks are awaited: refused, not counted
  auto ack = [&](uint32_t c) {
    float* dst = nullptr;
    REQUIRE(f.slots.begin(0, c, false, false, 2, true, dst) == answer_verdict::ack);
    f.slots.answered(0, c, 0, false, false);
  };
  ack(0);
  CHECK(f.events->take().empty());
  ack(1);
  auto told = f.events->take();
  REQUIRE(told.size() == 1);
  CHECK((told[0].what == "answered" && told[0].seq == 11));
  CHECK(f.slots.wake_when_answered(0, 11, 2)); // reached already
  CHECK(f.slots.wake_when_answered(0, 10, 3)); // another operation: over
  CHECK_FALSE(f.slots.wake_when_answered(0, 11, 4));
  ack(2);
  ack(3);
  told = f.events->take();
  REQUIRE(told.size() == 2);
  CHECK(told[0].what == "answered");
  CHECK(told[1].what == "done");
}

TEST_CASE("a subscription announces each whole version once", "[answer_slots]") {
  fixture f;
  std::vector<float> sub(4096, 0.0f);
  std::vector<uint64_t> versions;
  CHECK(f.slots.subscription(0) == nullptr);
  f.slots.subscribe(0, sub.data(), [&](uint64_t v) { versions.push_back(v); });
  CHECK(f.slots.subscription(0) == sub.data());
  auto copy = [](float* dst) { dst[0] += 1.0f; };
  f.slots.published(0, 0, 1, copy);
  f.slots.published(0, 1, 1, copy);
  f.slots.published(0, 2, 2, copy);
  CHECK(versions.empty());
  f.slots.published(0, 3, 1, copy);
  CHECK(versions == std::vector<uint64_t>{1});
  f.slots.published(0, 3, 1, copy); // the same version again
  f.slots.published(0, 0, 2);
  f.slots.published(0, 1, 3);
  CHECK(versions == std::vector<uint64_t>{1});
  f.slots.published(0, 3, 2);
  CHECK(versions == std::vector<uint64_t>{1, 2});
  CHECK(sub[0] == 5.0f); // every copy ran under the slot's lock, into the subscription
}

TEST_CASE("a proxy arms while a receiver answers: each operation told once, in order",
          "[answer_slots]") {
  fixture f;
  std::vector<float> out(4096);
  constexpr uint64_t ops = 300;
  std::atomic<uint64_t> armed{0};
  std::thread receiver([&] {
    // Answers every chunk of whatever is armed, twice (a duplicate each), until the
    // last operation is in; bounded in time.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      auto seq = armed.load();
      for (uint32_t c = 0; c < 4; ++c)
        for (int twice = 0; twice < 2; ++twice)
          f.update(0, c, seq);
      if (seq == ops)
        break;
      std::this_thread::yield();
    }
  });
  bool all = true;
  for (uint64_t seq = 1; seq <= ops && all; ++seq) {
    f.slots.arm(0, armed_op{seq, true, out.data(), seq});
    armed.store(seq);
    all = f.events->wait_outcome(0, seq);
  }
  receiver.join();
  CHECK(all);
  auto told = f.events->take();
  REQUIRE(told.size() == ops);
  for (uint64_t i = 0; i < ops; ++i)
    CHECK((told[i].what == "done" && told[i].seq == i + 1));
}

} // namespace rw_unit_answer_slots
