// The rack coordinator's admission rules as plain functions (logic/admission.hpp) and
// the attach proofs' ledger (logic/attach_ledger.hpp), without a node.

#include <catch2/catch.hpp>

#include "logic/admission.hpp"
#include "logic/attach_ledger.hpp"
#include "logic/chunk_state.hpp"

namespace rw_unit_admission_rules {

using rw::errc;
using namespace rw::actors::detail;

namespace {

rw::job_spec spec(const char* name = "j", uint64_t elements = 1000) {
  rw::job_spec s;
  s.name = name;
  s.num_workers = 2;
  s.chunk_bytes = 1024;
  s.tensors = {{"w", elements, false}};
  return s;
}

admission_limits limits(uint64_t max_job_bytes = uint64_t{1} << 30) {
  return {"n0", 1 << 20, 64, max_job_bytes, 2};
}

std::vector<std::byte> nonce(uint8_t b) {
  return std::vector<std::byte>(24, std::byte{b});
}

} // namespace

TEST_CASE("a job's footprint counts every chunk's arrays on cache lines and its "
          "bookkeeping",
          "[admission_rules]") {
  auto s = spec("j", 1000); // 256 floats a chunk: 3 full chunks of 1 KiB, one of 232
  s.optimizer.kind = rw::optimizer_kind::sum;
  const uint64_t last = (232 * 4 + 63) / 64 * 64;
  const uint64_t arrays = 1 + rw::runtime::state_arrays(rw::optimizer_kind::sum);
  CHECK(job_footprint(s) == arrays * (3 * 1024 + last) + 4 * sizeof(chunk_state));
  s.optimizer.kind = rw::optimizer_kind::adam; // m and v on top of the parameters
  CHECK(job_footprint(s) > (3 * 1024 + last) * 3);
}

TEST_CASE("a hello is checked against its spec, its rank and the node's memory",
          "[admission_rules]") {
  CHECK_FALSE(check_hello(spec(), 1, limits()));

  auto bad = spec();
  bad.num_workers = 0;
  auto r = check_hello(bad, 0, limits());
  CHECK(r.code == errc::invalid_spec);
  CHECK_THAT(r.why, Catch::StartsWith("invalid job spec: "));
  CHECK_THAT(r.log, Catch::StartsWith(" job='j': invalid job spec: "));

  r = check_hello(spec(), 5, limits());
  CHECK(r.code == errc::bad_rank);
  CHECK(r.why == "rank 5 is outside 0..1");
  CHECK(r.log == " job='j': rank 5 outside 0..1");

  auto big = spec("big", 3 << 20); // 12 MiB of floats, 3 MiB of chunk bookkeeping
  const auto mib = job_footprint(big) >> 20;
  CHECK(mib >= 12);
  CHECK(mib < 16);
  r = check_hello(big, 0, limits(8 << 20));
  CHECK(r.code == errc::invalid_spec);
  CHECK_THAT(r.why, Catch::Contains("job 'big' needs " + std::to_string(mib) + " MiB")
                      && Catch::Contains("allows 8 MiB per job (--max-job-mib)"));
  CHECK(r.log == ": " + r.why);
  CHECK_FALSE(check_hello(big, 0, limits(16 << 20)));
  // A tenant's reservation below the node's limit is the limit; above it, the node's.
  r = check_hello(big, 0, limits(16 << 20), 4 << 20);
  CHECK_THAT(r.why, Catch::Contains("created with memory = 4 MiB (rw.job_create)"));
  CHECK_FALSE(check_hello(big, 0, limits(16 << 20), 64 << 20));
}

TEST_CASE("a hello by name takes the running job's spec, else its grant's",
          "[admission_rules]") {
  auto running = spec("j", 3000);
  running.num_workers = 4;
  auto stated = spec("j", 0);
  stated.tensors.clear();
  SECTION("a stated spec is left alone") {
    auto s = spec("j", 7);
    CHECK_FALSE(resolve_spec(s, false, 0, &running, nullptr, limits()));
    CHECK(s.tensors[0].elements == 7);
  }
  SECTION("the running job's") {
    CHECK_FALSE(resolve_spec(stated, true, 3, &running, nullptr, limits()));
    CHECK(stated.num_workers == 4);
    CHECK(stated.tensors[0].elements == 3000);
  }
  SECTION("a grant without tensors takes the worker's") {
    auto granted = spec("j", 0);
    granted.tensors.clear();
    stated.tensors = {{"w", 42, false}};
    CHECK_FALSE(resolve_spec(stated, true, 0, nullptr, &granted, limits()));
    CHECK(stated.tensors.size() == 1);
    CHECK(stated.tensors[0].elements == 42);
  }
  SECTION("no tensors anywhere") {
    auto granted = spec("j", 0);
    granted.tensors.clear();
    auto r = resolve_spec(stated, true, 1, nullptr, &granted, limits());
    CHECK(r.code == errc::invalid_spec);
    CHECK_THAT(r.why, Catch::Contains("has no tensors yet"));
    CHECK_THAT(r.log, Catch::StartsWith(" rank=1: job 'j' has no tensors yet"));
  }
  SECTION("other tensors than the job's") {
    stated.tensors = {{"w", 3001, false}};
    auto r = resolve_spec(stated, true, 1, &running, nullptr, limits());
    CHECK(r.code == errc::spec_mismatch);
    CHECK_THAT(r.why, Catch::Contains("3000") && Catch::Contains("3001"));
  }
  SECTION("a job the node does not have") {
    auto r = resolve_spec(stated, true, 0, nullptr, nullptr, limits());
    CHECK(r.code == errc::unknown_job);
    CHECK_THAT(r.why, Catch::Contains("no job named 'j' on node n0"));
  }
}

TEST_CASE("a host's open jobs are capped", "[admission_rules]") {
  CHECK_FALSE(check_open_job_quota("10.0.0.1", {"a"}, spec("q"), 0, limits()));
  auto r = check_open_job_quota("10.0.0.1", {"a", "b"}, spec("q"), 3, limits());
  CHECK(r.code == errc::too_many_requests);
  CHECK(r.why
        == "host 10.0.0.1 has created 2 live jobs on node n0 already (at most 2, "
           "--max-open-jobs-per-peer): finish or stop one of [a, b] first");
  CHECK(r.log == " job='q' rank=3: " + r.why);
  auto unlimited = limits();
  unlimited.max_open_jobs_per_peer = 0;
  CHECK_FALSE(check_open_job_quota("10.0.0.1", {"a", "b", "c"}, spec("q"), 0, unlimited));
}

TEST_CASE("every open job together stays within the node's budget", "[admission_rules]") {
  auto l = limits();
  auto one = job_footprint(spec("q", 100'000));
  l.max_open_jobs_bytes = 2 * one + one / 2;
  CHECK_FALSE(check_open_jobs_budget(0, {}, spec("q", 100'000), 0, l));
  CHECK_FALSE(check_open_jobs_budget(one, {"a"}, spec("q", 100'000), 0, l));
  auto r = check_open_jobs_budget(2 * one, {"a", "b"}, spec("q", 100'000), 1, l);
  CHECK(r.code == errc::too_many_requests);
  CHECK_THAT(r.why, Catch::Contains("the 2 live open job(s) on node n0 hold")
                      && Catch::Contains("(--max-open-jobs-mib): finish or stop one of "
                                         "[a, b] first"));
  CHECK(r.log == " job='q' rank=1: " + r.why);
  l.max_open_jobs_bytes = 0; // no bound
  CHECK_FALSE(check_open_jobs_budget(uint64_t{1} << 40, {"a"}, spec("q"), 0, l));
}

TEST_CASE("an attach proof's nonce is taken once per welcome, and only so many",
          "[admission_rules]") {
  attach_ledger ledger;
  using v = attach_ledger::verdict;
  CHECK(ledger.take(1, 77, nonce(1)) == v::taken);
  CHECK(ledger.take(1, 77, nonce(1)) == v::replayed);
  CHECK(ledger.take(0, 77, nonce(1)) == v::taken); // another rank's
  CHECK(ledger.take(1, 77, nonce(2)) == v::taken);
  CHECK(ledger.taken(1) == 2);
  CHECK(ledger.taken(9) == 0);
  // A new welcome (a new attach token) starts afresh: the old nonces are forgotten,
  // a proof under the old token cannot match the new one's MAC anyway.
  CHECK(ledger.take(1, 78, nonce(1)) == v::taken);
  CHECK(ledger.taken(1) == 1);
  for (size_t i = 1; i < attach_ledger::max_per_welcome; ++i) {
    std::vector<std::byte> n(8);
    for (size_t b = 0; b < 8; ++b)
      n[b] = std::byte((i >> (8 * b)) & 0xff);
    REQUIRE(ledger.take(1, 78, n) == v::taken);
  }
  CHECK(ledger.taken(1) == attach_ledger::max_per_welcome);
  CHECK(ledger.take(1, 78, nonce(9)) == v::exhausted);
  CHECK(ledger.take(1, 78, nonce(1)) == v::exhausted);
  CHECK(ledger.taken(1) == attach_ledger::max_per_welcome);
}

} // namespace rw_unit_admission_rules
