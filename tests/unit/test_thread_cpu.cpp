// Another thread's CPU time, read from outside it (runtime/thread_cpu.hpp): what the
// in-node balancer samples instead of asking a busy shard by message.

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "runtime/thread_cpu.hpp"

namespace rw_unit_thread_cpu {

using namespace rw::runtime;
using namespace std::chrono_literals;

namespace {

// Burns CPU on the calling thread until its own CPU time has grown by `ns`.
void spin_for_cpu(uint64_t ns) {
  auto start = this_thread_cpu_ns();
  volatile uint64_t sink = 0;
  while (this_thread_cpu_ns() - start < ns)
    for (int i = 0; i < 10000; ++i)
      sink = sink + uint64_t(i);
}

// Waits (bounded) until `done` holds.
template <class F>
bool eventually(F done) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

TEST_CASE("an empty slot reads nothing", "[thread_cpu]") {
  thread_cpu_slot slot;
  CHECK_FALSE(slot.read_ns().has_value());
}

TEST_CASE("a slot reads the publishing thread's CPU time, not the reader's",
          "[thread_cpu]") {
  thread_cpu_slot slot;
  std::atomic<int> phase{0}; // 1: published and spun; 2: told to end
  std::thread worker{[&] {
    auto token = slot.publish_this_thread();
    spin_for_cpu(50'000'000); // 50 ms of CPU
    phase = 1;
    while (phase.load() != 2) // idle: its CPU time stays put
      std::this_thread::sleep_for(1ms);
    slot.withdraw(token);
  }};
  REQUIRE(eventually([&] { return phase.load() == 1; }));
  auto first = slot.read_ns();
  REQUIRE(first.has_value());
  CHECK(*first >= 50'000'000);
  // The reader burning CPU does not move the worker's clock (it sleeps).
  spin_for_cpu(100'000'000);
  auto second = slot.read_ns();
  REQUIRE(second.has_value());
  CHECK(*second - *first < 50'000'000);
  phase = 2;
  worker.join();
  CHECK_FALSE(slot.read_ns().has_value()); // it withdrew
}

TEST_CASE("a thread that ends without withdrawing reads as nothing", "[thread_cpu]") {
  thread_cpu_slot slot;
  std::thread worker{[&] { slot.publish_this_thread(); }};
  worker.join();
  // join returns once the kernel clears the thread's tid word, a moment before it
  // releases the task: until then its clock can still be read (seen once in 20 runs
  // here). Gone within the wait, and never anything but that thread's time.
  CHECK(eventually([&] { return !slot.read_ns().has_value(); }));
}

TEST_CASE("an ending thread never withdraws its successor's clock", "[thread_cpu]") {
  thread_cpu_slot slot;
  uint32_t old_token = slot.publish_this_thread(); // the thread before, say
  std::atomic<bool> published{false};
  std::atomic<bool> end{false};
  std::thread successor{[&] {
    slot.publish_this_thread();
    published = true;
    while (!end.load())
      std::this_thread::sleep_for(1ms);
  }};
  REQUIRE(eventually([&] { return published.load(); }));
  slot.withdraw(old_token); // late: the successor has published since
  CHECK(slot.read_ns().has_value());
  end = true;
  successor.join();
}

TEST_CASE("a named thread shows its name in /proc, cut to 15 characters",
          "[thread_cpu]") {
  std::string names[2];
  std::thread named{[&] {
    auto comm = [] {
      std::ifstream f{"/proc/thread-self/comm"};
      std::string line;
      std::getline(f, line);
      return line;
    };
    name_this_thread("rw-shard-3");
    names[0] = comm();
    name_this_thread("rw-poll-fab-1234567890");
    names[1] = comm();
  }};
  named.join();
  CHECK(names[0] == "rw-shard-3");
  CHECK(names[1] == "rw-poll-fab-123");
}

} // namespace rw_unit_thread_cpu
