// Gradient compression (job_spec compression: bf16, fp16, topk:R) end to end, on a real
// node over every transport: results equal the single-process reference bitwise, what
// travels shrinks, and pushes that do not match the job's compression are refused.

#include <cstring>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "apps/tools/subprocess.hpp"
#include "protocol/half.hpp"
#include "rackweave/worker.hpp"
#include "runtime/compression.hpp"
#include "tests/support/bench_json.hpp"
#include "tests/support/expect_error.hpp"
#include "tests/support/job_options.hpp"
#include "tests/support/node_process.hpp"
#include "tests/support/raw_client.hpp"

namespace rw_integration_compression {

using namespace rw;
using protocol::frame_header;
using protocol::frame_kind;

namespace {

worker_options compressed(const std::string& address, const std::string& job,
                          uint32_t rank, const std::string& transport,
                          const std::string& compression, bool updates,
                          uint64_t elements = 3000, uint32_t workers = 2) {
  auto o = testing::job_options(address, job, rank, transport, elements, workers);
  o.job.compression = parse_compression(compression);
  o.job.compression.updates = updates;
  return o;
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

struct bench_run {
  std::string json;
  int exit = -1;
};

bench_run run_bench(const std::string& address, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{RW_BENCH_PATH, "comm",  "--connect",     address,
                                "--workers",   "3",     "--bytes",       "192KiB",
                                "--iters",     "4",     "--chunk-bytes", "16KiB",
                                "--verify",    "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  tools::subprocess p{argv, true};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  bench_run out;
  out.json = p.read_all(deadline);
  auto rc = p.wait_until(deadline);
  if (!rc)
    p.stop();
  out.exit = rc ? *rc : -1;
  return out;
}

} // namespace

TEST_CASE("bf16 and fp16 push 16-bit values and the node sums them in float32",
          "[integration][compression]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    for (bool updates : {false, true}) {
      DYNAMIC_SECTION(transport << (updates ? " with compressed updates" : "")) {
        auto job = fmt::format("half-{}-{}", transport, updates ? 1 : 0);
        worker a{compressed(node.address(), job, 0, transport, "bf16", updates)};
        worker b{compressed(node.address(), job, 1, transport, "bf16", updates)};
        REQUIRE(std::string(a.transport()) == transport);
        // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 in bf16: to even, 1. 1 + 3 * 2^-9
        // rounds up to 1 + 2^-7. The node sums what arrived in float32: 2 + 2^-7, which
        // bf16 cannot hold (its spacing is 2^-6 from 2 on): a compressed update rounds
        // it, to even, to 2.
        std::vector<float> ga(3000, 1.0f + 0x1p-8f), gb(3000, 1.0f + 3 * 0x1p-9f);
        std::vector<float> oa(3000), ob(3000);
        auto fa = a.push_pull("t", ga.data(), oa.data());
        auto fb = b.push_pull("t", gb.data(), ob.data());
        fa.get();
        fb.get();
        const float want = updates ? 2.0f : 2.0f + 0x1p-7f;
        for (size_t i : {size_t{0}, size_t{1023}, size_t{1024}, size_t{2999}}) {
          INFO(i);
          CHECK(bits(oa[i]) == bits(want));
          CHECK(bits(ob[i]) == bits(want));
        }
        if (transport != "shm") {
          // What travelled: 16-bit pushes (and updates) plus the 64-byte headers; 3
          // chunks of 1024 values (the last 952).
          uint64_t chunks = 3, payload16 = 3000 * 2, payload32 = 3000 * 4;
          CHECK(a.wire_bytes_sent() == chunks * protocol::frame_header_bytes + payload16);
          CHECK(a.wire_bytes_received()
                == chunks * protocol::frame_header_bytes
                     + (updates ? payload16 : payload32));
        }
      }
    }
  }
}

TEST_CASE("a sparse push in a bf16 job is rounded as a dense one, over every transport",
          "[integration][compression]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    DYNAMIC_SECTION(transport) {
      worker w{compressed(node.address(), "half-sparse-" + transport, 0, transport,
                          "bf16", false, 3000, 1)};
      // Index 3 twice: 1 + 2^-8 in all, a bf16 tie that rounds to 1; index 2500 alone.
      std::vector<uint64_t> idx{3, 3, 2500};
      std::vector<float> val{1.0f, 0x1p-8f, 1.0f + 3 * 0x1p-9f};
      std::vector<float> out(3000, -1.0f);
      w.push_pull_sparse("t", idx.data(), val.data(), idx.size(), out.data()).get();
      CHECK(out[3] == 1.0f);
      CHECK(out[2500] == 1.0f + 0x1p-7f);
      CHECK(out[0] == 0.0f);
      CHECK(out[2999] == 0.0f);
    }
  }
}

TEST_CASE("fp16 keeps small gradients with its per-chunk scale",
          "[integration][compression]") {
  testing::node_process node;
  worker w{compressed(node.address(), "fp16-small", 0, "tcp", "fp16", true, 2048, 1)};
  std::vector<float> g(2048), out(2048);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = 1e-7f * static_cast<float>(i + 1)
           * (i % 2 ? -1.0f : 1.0f); // below fp16's range
  w.push_pull("t", g.data(), out.data()).get();
  for (size_t i = 0; i < g.size(); i += 97) {
    INFO(i);
    CHECK(out[i] != 0.0f);
    CHECK(std::abs(out[i] - g[i]) <= std::abs(g[i]) * 0x1p-10f);
  }
  // Bitwise what the pack-and-widen reference gives, per chunk (1024 values).
  auto ref = g;
  protocol::round_half(protocol::flag_fp16, ref.data(), 1024);
  protocol::round_half(protocol::flag_fp16, ref.data() + 1024, 1024);
  CHECK(std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)) == 0);
}

TEST_CASE("top-k sends each chunk's largest entries and keeps the rest for later",
          "[integration][compression]") {
  testing::node_process node{testing::fabric_node_args()};
  for (const std::string& transport : testing::protocol_transports()) {
    DYNAMIC_SECTION(transport) {
      // One worker, two chunks of 1024 elements (the shortest that top-k thins), ratio
      // 0.001: ceil(1.024) = 2 entries per chunk.
      auto o = compressed(node.address(), "topk-" + transport, 0, transport, "topk:0.001",
                          false, 2048, 1);
      o.job.chunk_bytes = 4096;
      worker w{o};
      std::vector<float> g(2048, 0.0f);
      g[0] = 5, g[1] = 1, g[2] = -3, g[3] = 0.5f, g[7] = 0.25f;
      for (size_t i = 1024; i < 1032; ++i)
        g[i] = 1; // all tie: the lowest indexes go first
      std::vector<float> out(2048, -9.0f);
      w.push_pull("t", g.data(), out.data()).get();
      std::vector<float> want(2048, 0.0f);
      want[0] = 5, want[2] = -3, want[1024] = 1, want[1025] = 1;
      CHECK(out == want);
      // Nothing new: what was held back goes out, largest first.
      std::vector<float> zero(2048, 0.0f);
      w.push_pull("t", zero.data(), out.data()).get();
      want.assign(2048, 0.0f);
      want[1] = 1, want[3] = 0.5f, want[1026] = 1, want[1027] = 1;
      CHECK(out == want);
      if (transport != "shm") // 2 pairs of 8 bytes per chunk, not 4 KiB of floats
        CHECK(w.wire_bytes_sent() == 2 * 2 * (protocol::frame_header_bytes + 2 * 8));
    }
  }
}

TEST_CASE("top-k sends a short chunk whole and more of the rest during its warm-up",
          "[integration][compression]") {
  testing::node_process node;
  SECTION("a 16-element tensor, as a bias would be, travels whole and exact") {
    auto o = compressed(node.address(), "topk-short", 0, "tcp", "topk:0.01", false, 16,
                        1);
    worker w{o};
    std::vector<float> g{5, 1, -3, 0.5f, 0, 0, 0, 0.25f, 1, 1, 1, 1, 1, 1, 1, 1};
    std::vector<float> out(16, -9.0f);
    w.push_pull("t", g.data(), out.data()).get();
    CHECK(out == g);
    CHECK(w.wire_bytes_sent() == protocol::frame_header_bytes + 16 * sizeof(float));
  }
  SECTION("warm-up: a quarter of each chunk, then a sixteenth, ..., then the ratio") {
    // 4096 elements in one chunk, topk:0.001 (5 per step) over 8 warm-up steps: 2 steps
    // each at 1024, 256, 64 and 16 (the ratio is lower), then 5.
    auto o = compressed(node.address(), "topk-warm", 0, "tcp", "topk:0.001,warmup=8",
                        false, 4096, 1);
    o.job.chunk_bytes = 16384;
    worker w{o};
    CHECK(w.spec().compression.warmup == 8);
    std::vector<float> g(4096), out(4096);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = 1.0f + static_cast<float>(i % 97); // no zero: each sent entry is a pair
    const std::vector<uint64_t> sent{1024, 1024, 256, 256, 64, 64, 16, 16, 5, 5};
    uint64_t before = 0;
    for (size_t step = 0; step < sent.size(); ++step) {
      w.push_pull("t", g.data(), out.data()).get();
      INFO("step " << step);
      CHECK(w.wire_bytes_sent() - before
            == protocol::frame_header_bytes + sent[step] * 8);
      before = w.wire_bytes_sent();
    }
  }
}

TEST_CASE("rw-bench comm --verify checks every compression against its reference",
          "[integration][compression]") {
  testing::node_process node{testing::fabric_node_args()};
  auto plain = run_bench(node.address(), {"--compression", "none"});
  INFO(plain.json);
  REQUIRE(plain.exit == 0);
  auto plain_out = testing::bench_json(plain.json);
  CHECK(plain_out["verified"] == true);
  const double plain_bytes = plain_out["wire_bytes"].get<double>();
  // 3 workers x 192 KiB, both ways, plus headers.
  CHECK(plain_bytes >= 2.0 * 3 * 192 * 1024);
  struct mode {
    std::vector<std::string> args;
    double low, high; // wire bytes against the uncompressed run's
  };
  const std::vector<mode> modes{
    {{"--compression", "bf16"}, 0.49, 0.52},
    {{"--compression", "fp16"}, 0.49, 0.52},
    {{"--compression", "bf16", "--no-compress-updates"}, 0.74, 0.77},
    {{"--compression", "topk:0.01"}, 0.5, 0.53}, // pushes ~2 %, updates dense
    {{"--compression", "fp16", "--transport", "shm"}, 0.0, 0.01},
    {{"--compression", "topk:0.05", "--transport", "fabric"}, 0.5, 0.6},
    {{"--compression", "topk:0.01,warmup=3"}, 0.5, 0.6}, // 4 of 5 steps in the warm-up
  };
  for (auto& m : modes) {
    auto run = run_bench(node.address(), m.args);
    INFO(fmt::format("{}", fmt::join(m.args, " ")) << "\n" << run.json);
    CHECK(run.exit == 0);
    auto out = testing::bench_json(run.json);
    CHECK(out["verified"] == true);
    auto ratio = out["wire_bytes"].get<double>() / plain_bytes;
    CHECK(ratio >= m.low);
    CHECK(ratio <= m.high);
  }
}

// A node with two endpoints: each worker attaches to both and its chunks' answers come
// over both connections at once, read in turns by the worker's one receiver, so one
// connection's 16-bit update may be half in when the other's arrives. Large chunks make
// that likely; each must still land whole (it once shared one buffer: NaNs, wrong values).
TEST_CASE("16-bit updates over a node's two endpoints each land whole",
          "[integration][compression]") {
  testing::node_process node{{"--listen", "127.0.0.1:0"}};
  for (const std::string compression : {"bf16", "fp16"}) {
    tools::subprocess p{{RW_BENCH_PATH, "comm", "--connect", node.address(), "--workers",
                         "3", "--bytes", "16MiB", "--iters", "6", "--chunk-bytes",
                         "512KiB", "--compression", compression, "--verify", "--json"},
                        true};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto out = p.read_all(deadline);
    auto rc = p.wait_until(deadline);
    if (!rc)
      p.stop();
    INFO(compression << "\n" << out);
    CHECK(rc.value_or(-1) == 0);
    CHECK(testing::bench_json(out)["verified"] == true);
  }
}

TEST_CASE("pushes that do not match the job's compression are refused",
          "[integration][compression][bad]") {
  testing::node_process node;
  job_spec spec;
  spec.name = "half-bad";
  spec.num_workers = 2;
  spec.chunk_bytes = 4096;
  spec.tensors = {{"t", 3000, false}};
  spec.compression = parse_compression("bf16");
  testing::raw_client c{node.address()};
  auto id = c.join(spec, 0);
  frame_header h;
  h.kind = frame_kind::push;
  h.job_id = id;
  // float32 values in a bf16 job
  c.send_floats(h, std::vector<float>(1024, 1.0f));
  CHECK_THAT(testing::expect_error(c, errc::bad_chunk),
             Catch::Contains("carries float32 values") && Catch::Contains("bf16"));
  // fp16 flagged in a bf16 job
  h.flags = protocol::flag_fp16;
  std::vector<std::byte> payload(protocol::half_payload_bytes(protocol::flag_fp16, 1024));
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  c.send_frame(h, payload.data());
  CHECK_THAT(testing::expect_error(c, errc::bad_chunk),
             Catch::Contains("flagged as fp16"));
  // bf16 of the wrong size
  h.flags = protocol::flag_bf16;
  h.payload_bytes = 1024 * 4;
  c.send_floats(h, std::vector<float>(1024, 1.0f));
  CHECK_THAT(testing::expect_error(c, errc::bad_chunk),
             Catch::Contains("holds 2048 bytes"));
  // A 16-bit init: inits are exact
  h.kind = frame_kind::init;
  h.payload_bytes = 2048;
  std::vector<std::byte> half(2048);
  c.send_frame(h, half.data());
  CHECK_THAT(testing::expect_error(c, errc::bad_chunk), Catch::Contains("init frame"));
  // A worker that states another compression is told the difference.
  try {
    auto o = compressed(node.address(), "half-bad", 1, "tcp", "fp16", false);
    worker w{o};
    FAIL("a worker stating fp16 joined a bf16 job");
  } catch (const rw::error& e) {
    CHECK(e.code() == errc::spec_mismatch);
    CHECK_THAT(e.what(), Catch::Contains("compresses bf16") && Catch::Contains("fp16"));
  }
  // A job whose fp16 push carries a scale that is not a power of two: nothing applied.
  spec.name = "half-scale";
  spec.compression = parse_compression("fp16");
  testing::raw_client d{node.address()};
  auto id2 = d.join(spec, 0);
  frame_header p;
  p.kind = frame_kind::push;
  p.job_id = id2;
  p.flags = protocol::flag_fp16;
  std::vector<std::byte> fp16(protocol::half_payload_bytes(protocol::flag_fp16, 1024));
  float scale = 3.0f;
  std::memcpy(fp16.data(), &scale, sizeof scale);
  p.payload_bytes = static_cast<uint32_t>(fp16.size());
  d.send_frame(p, fp16.data());
  CHECK_THAT(testing::expect_error(d, errc::bad_chunk),
             Catch::Contains("not a normal power of two"));
  CHECK(node.wait_for_log("frame refused"));
}

TEST_CASE("compressed jobs over two racks' nodes, flat and hierarchical, verify",
          "[integration][compression][racks]") {
  testing::node_process a{{"--name", "na", "--rack", "a"}, {"rack-agg", false, {}}};
  testing::node_process b{{"--name", "nb", "--rack", "b"},
                          {"rack-agg", false, a.address()}};
  REQUIRE(a.wait_for_log("2 node(s) live", std::chrono::seconds(15)));
  // Flat: each worker sends every chunk to its home node (replicas: the homes' sums
  // go to the replicas as float32). Hierarchical: the rack-aggs widen their workers'
  // chunks and the racks' partial sums cross the core as float32.
  const std::vector<std::vector<std::string>> runs{
    {"--worker-racks", "a,a,b,b", "--reduction", "flat", "--compression", "bf16"},
    {"--worker-racks", "a,b,a,b", "--reduction", "hierarchical", "--compression", "bf16"},
    {"--worker-racks", "a,b,a,b", "--reduction", "hierarchical", "--compression", "fp16",
     "--no-compress-updates"},
    {"--worker-racks", "a,b,a,b", "--reduction", "hierarchical", "--compression",
     "topk:0.05"},
  };
  for (auto& extra : runs) {
    std::vector<std::string> argv{RW_BENCH_PATH, "comm",  "--connect",     a.address(),
                                  "--workers",   "4",     "--bytes",       "256KiB",
                                  "--iters",     "3",     "--chunk-bytes", "16KiB",
                                  "--verify",    "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto err = testing::temp_path("bench.err");
    tools::subprocess p{argv, true, err};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto out = p.read_all(deadline);
    auto code = p.wait_until(deadline);
    if (!code)
      p.stop();
    INFO(fmt::format("{}", fmt::join(extra, " ")) << "\n"
                                                  << out << testing::read_file(err));
    std::remove(err.c_str());
    CHECK(code == std::optional<int>{0});
    auto j = testing::bench_json(out);
    CHECK(j["verified"] == true);
    CHECK(j["nodes"] == 2);
  }
}

} // namespace rw_integration_compression
