#include <catch2/catch.hpp>

#include "rackweave/job_spec.hpp"

namespace {

rw::job_spec good() {
  rw::job_spec s;
  s.name = "j";
  s.num_workers = 2;
  s.tensors = {{"w", 10, false}};
  return s;
}

} // namespace

TEST_CASE("job specs are validated with a reason", "[job_spec]") {
  CHECK(rw::validate(good(), 1 << 20, 16).empty());
  auto s = good();
  s.num_workers = 0;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("workers"));
  s = good();
  s.chunk_bytes = 6;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("multiple of 4"));
  s = good();
  s.chunk_bytes = 1 << 21;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("chunk size"));
  s = good();
  s.tensors.push_back({"w", 3, false});
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("twice"));
  s = good();
  s.tensors[0].elements = 0;
  CHECK_FALSE(rw::validate(s, 1 << 20, 16).empty());
  s = good();
  s.optimizer.kind = rw::optimizer_kind::adam;
  s.optimizer.beta1 = 1.0f;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("adam"));
}

TEST_CASE("mismatching specs name the difference", "[job_spec]") {
  auto a = good();
  auto b = good();
  CHECK(rw::describe_mismatch(a, b).empty());
  b.tensors[0].elements = 11;
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("'w' with 10 elements"));
  b = good();
  b.optimizer.learning_rate = 0.5f;
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("optimizer"));
  b = good();
  b.num_workers = 3;
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("2 workers"));
}

TEST_CASE("optimizer names parse", "[job_spec]") {
  CHECK(rw::parse_optimizer_kind("adam") == rw::optimizer_kind::adam);
  CHECK(rw::parse_optimizer_kind("nesterov") == rw::optimizer_kind::nesterov);
  CHECK_FALSE(rw::parse_optimizer_kind("adamw"));
}

TEST_CASE("a job's chunk count fits its bookkeeping: no truncation to 32 bits",
          "[job_spec]") {
  auto s = good();
  s.chunk_bytes = 4;
  s.tensors[0].elements = uint64_t{1} << 34; // 2^34 chunks of one element
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("chunks") && Catch::Contains("2^24"));
  // Spread over tensors, the job's total counts.
  s.tensors = {{"a", uint64_t{1} << 23, false}, {"b", uint64_t{1} << 23, false},
               {"c", 1, false}};
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("16777217 chunks"));
  s.tensors.pop_back();
  CHECK(rw::validate(s, 1 << 20, 16).empty()); // exactly 2^24
  // Large chunks: the same elements are few chunks.
  s.chunk_bytes = 1 << 20;
  s.tensors = {{"w", uint64_t{1} << 34, false}};
  CHECK(rw::validate(s, 1 << 20, 16).empty());
}
