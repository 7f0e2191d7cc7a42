#include <catch2/catch.hpp>

#include "rackweave/job_spec.hpp"

namespace rw_unit_job_spec {

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

TEST_CASE("job names are limited to a safe character set", "[job_spec]") {
  // (NAME/top: a hierarchical job's top level, which the rack-aggs make themselves.)
  for (auto ok : {"resnet", "bench-123-4", "a.b_c-d", "team:resnet", "_x", "9lives",
                  "resnet/top"}) {
    auto s = good();
    s.name = ok;
    CHECK(rw::validate(s, 1 << 20, 16).empty());
  }
  for (auto bad :
       {"with space", "a/b", "../up", "-flag", ".hidden", "t:a:b", "t:", ":x", "quote'",
        "semi;colon", "/top", "a/top/top", "top/x", "new\nline", "tab\t", "caf\u00e9"}) {
    auto s = good();
    s.name = bad;
    INFO(bad);
    CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("may hold only letters"));
  }
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
  CHECK_THAT(rw::validate(s, 1 << 20, 16),
             Catch::Contains("chunks") && Catch::Contains("2^24"));
  // Spread over tensors, the job's total counts.
  s.tensors = {
    {"a", uint64_t{1} << 23, false}, {"b", uint64_t{1} << 23, false}, {"c", 1, false}};
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("16777217 chunks"));
  s.tensors.pop_back();
  CHECK(rw::validate(s, 1 << 20, 16).empty()); // exactly 2^24
  // Large chunks: the same elements are few chunks.
  s.chunk_bytes = 1 << 20;
  s.tensors = {{"w", uint64_t{1} << 34, false}};
  CHECK(rw::validate(s, 1 << 20, 16).empty());
}

TEST_CASE("compressions parse, validate and are compared between specs", "[job_spec]") {
  using rw::compression_spec;
  CHECK(rw::parse_compression("none").kind == compression_spec::none);
  CHECK(rw::parse_compression("bf16").kind == compression_spec::bf16);
  CHECK(rw::parse_compression("fp16").kind == compression_spec::fp16);
  auto t = rw::parse_compression("topk:0.01");
  CHECK(t.kind == compression_spec::topk);
  CHECK(t.ratio == 0.01f);
  CHECK(rw::to_string(t) == "topk:0.01");
  CHECK(rw::parse_compression("topk:1").ratio == 1.0f);
  CHECK(t.warmup == 0);
  auto w = rw::parse_compression("topk:0.01,warmup=40");
  CHECK(w.kind == compression_spec::topk);
  CHECK(w.ratio == 0.01f);
  CHECK(w.warmup == 40);
  CHECK(rw::to_string(w) == "topk:0.01,warmup=40");
  CHECK(rw::parse_compression(rw::to_string(w)).warmup == 40);
  CHECK(rw::parse_compression("topk:0.5,warmup=0").warmup == 0);
  CHECK(rw::parse_compression("topk:0.5,warmup=2147483648").warmup == 2147483648u);
  for (auto bad : {"topk:0",
                   "topk:-0.1",
                   "topk:1.5",
                   "topk:",
                   "topk:x",
                   "topk:0.1x",
                   "topk:nan",
                   "top",
                   "BF16",
                   "",
                   "topk:0.1,",
                   "topk:0.1,warmup=",
                   "topk:0.1,warmup=-1",
                   "topk:0.1,warmup=+1",
                   "topk:0.1,warmup=1x",
                   "topk:0.1,warmup=2147483649",
                   "topk:0.1,warm=3",
                   "topk:,warmup=3",
                   "topk:0.1,warmup=3,warmup=4",
                   "bf16,warmup=3"})
    CHECK_THROWS_AS(rw::parse_compression(bad), std::invalid_argument);
  CHECK_THROWS_WITH(rw::parse_compression("zip"), Catch::Contains("none, bf16, fp16"));

  auto s = good();
  s.compression = rw::parse_compression("bf16");
  s.compression.updates = true;
  CHECK(rw::validate(s, 1 << 20, 16).empty());
  s.compression = rw::parse_compression("topk:0.5");
  s.compression.updates = true;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("compress_updates"));
  s.compression.updates = false;
  s.compression.ratio = 2.0f; // off the wire, not through the parser
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("ratio"));
  s.compression = rw::parse_compression("fp16");
  s.compression.ratio = 0.5f;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("topk only"));
  s.compression = rw::parse_compression("bf16");
  s.compression.warmup = 10; // off the wire
  CHECK_THAT(rw::validate(s, 1 << 20, 16),
             Catch::Contains("warm-up (10 steps) belongs to topk"));
  s.compression = rw::parse_compression("topk:0.1");
  s.compression.warmup = 0xffffffffu;
  CHECK_THAT(rw::validate(s, 1 << 20, 16), Catch::Contains("at most 2^31 steps"));

  auto a = good(), b = good();
  a.compression = rw::parse_compression("bf16");
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("compresses bf16"));
  b.compression = rw::parse_compression("bf16");
  CHECK(rw::describe_mismatch(a, b).empty());
  b.compression.updates = true;
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("compressed updates"));
  a.compression = rw::parse_compression("topk:0.1");
  b.compression = rw::parse_compression("topk:0.2");
  CHECK_THAT(rw::describe_mismatch(a, b), Catch::Contains("topk:0.2"));
  a.compression = rw::parse_compression("topk:0.01,warmup=5");
  b.compression = rw::parse_compression("topk:0.01");
  CHECK_THAT(rw::describe_mismatch(a, b),
             Catch::Contains("compresses topk:0.01,warmup=5, hello asks for topk:0.01"));
}

} // namespace rw_unit_job_spec
