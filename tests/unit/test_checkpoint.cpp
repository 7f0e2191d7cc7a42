// Checkpoint files: the chunk codec keeps every bit, the manifest's checksums catch a
// damaged file, a used directory is refused, and a chunk's state goes out and back.

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "logic/chunk_state.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/checkpoint/manifest.hpp"

namespace rw_unit_checkpoint {

namespace ck = rw::runtime::checkpoint;
namespace fs = std::filesystem;

namespace {

// A fresh directory name under the temp dir, removed when the test ends.
struct temp_dir {
  std::string path;
  temp_dir() {
    path = (fs::temp_directory_path()
            / ("rw-ckpt-test-" + std::to_string(::getpid()) + "-"
               + std::to_string(counter()++)))
             .string();
    fs::remove_all(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Values whose bits a lossy codec would change: NaN payloads, -0, denormals, infinity.
std::vector<float> awkward(size_t n, uint32_t seed) {
  std::vector<float> xs(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(i * 2654435761u + seed);
    std::memcpy(&xs[i], &bits, sizeof bits);
  }
  xs[0] = -0.0f;
  xs[1] = std::numeric_limits<float>::denorm_min();
  xs[2] = -std::numeric_limits<float>::infinity();
  return xs;
}

rw::job_spec two_tensor_job() {
  rw::job_spec spec;
  spec.name = "ck";
  spec.num_workers = 2;
  spec.chunk_bytes = 64; // 16 floats
  spec.optimizer.kind = rw::optimizer_kind::adam;
  spec.tensors = {{"a", 40, true}, {"b", 16, false}}; // 3 chunks + 1 chunk
  return spec;
}

ck::chunk_record record(uint32_t t, uint32_t c, uint32_t len, uint64_t version) {
  return {t,
          c,
          version,
          awkward(len, t * 100 + c),
          awkward(len, t * 100 + c + 7),
          awkward(len, t * 100 + c + 13)};
}

// Writes a two-file checkpoint of two_tensor_job at clock 5 into dir.
ck::manifest write_sample(const std::string& dir) {
  ck::prepare_dir(dir);
  ck::chunk_file f0{"ck", 5, "n0", {record(0, 0, 16, 5), record(0, 2, 8, 5)}};
  ck::chunk_file f1{"ck", 5, "n1", {record(0, 1, 16, 5), record(1, 0, 16, 5)}};
  ck::manifest m{
    two_tensor_job(), 5, {ck::write_chunk_file(dir, f0), ck::write_chunk_file(dir, f1)}};
  ck::write_manifest(dir, m);
  return m;
}

} // namespace

TEST_CASE("a chunk file round-trips every bit", "[checkpoint]") {
  ck::chunk_file f{"job-1", 42, "node-a", {record(0, 0, 300, 42), record(3, 9, 5, 42)}};
  f.chunks[1].m.clear(); // an optimizer without the arrays
  f.chunks[1].v.clear();
  auto back = ck::decode_chunk_file(ck::encode(f), "test");
  CHECK(back.job == f.job);
  CHECK(back.clock == 42);
  CHECK(back.node == "node-a");
  REQUIRE(back.chunks.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(back.chunks[i].tensor == f.chunks[i].tensor);
    CHECK(back.chunks[i].chunk == f.chunks[i].chunk);
    CHECK(back.chunks[i].version == 42);
    CHECK(same_bits(back.chunks[i].params, f.chunks[i].params));
    CHECK(same_bits(back.chunks[i].m, f.chunks[i].m));
    CHECK(same_bits(back.chunks[i].v, f.chunks[i].v));
  }
}

TEST_CASE("a checkpoint directory reads back through its manifest", "[checkpoint]") {
  temp_dir d;
  auto written = write_sample(d.path);
  auto m = ck::read_manifest(d.path);
  CHECK(m.clock == 5);
  CHECK(m.spec.optimizer.kind == rw::optimizer_kind::adam);
  CHECK(rw::describe_mismatch(m.spec, two_tensor_job()).empty());
  REQUIRE(m.files.size() == 2);
  CHECK(m.files[1].chunks == written.files[1].chunks);
  auto f = ck::read_chunk_file(d.path, m, m.files[1]);
  REQUIRE(f.chunks.size() == 2);
  CHECK(same_bits(f.chunks[1].v, record(1, 0, 16, 5).v));
  CHECK(!fs::exists(fs::path{d.path} / "MANIFEST.tmp"));
}

TEST_CASE("a flipped byte fails the checksum", "[checkpoint]") {
  temp_dir d;
  auto m = write_sample(d.path);
  auto path = fs::path{d.path} / m.files[0].name;
  {
    std::fstream file{path, std::ios::in | std::ios::out | std::ios::binary};
    file.seekg(100);
    char c = 0;
    file.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    file.seekp(100);
    file.write(&c, 1);
  }
  auto read = ck::read_manifest(d.path);
  CHECK_THROWS_WITH(ck::read_chunk_file(d.path, read, read.files[0]),
                    Catch::Contains("checksum") && Catch::Contains("damaged"));
  CHECK_NOTHROW(ck::read_chunk_file(d.path, read, read.files[1]));
}

TEST_CASE("a directory that is not empty, or has no manifest, is refused",
          "[checkpoint]") {
  temp_dir d;
  write_sample(d.path);
  CHECK_THROWS_WITH(ck::prepare_dir(d.path), Catch::Contains("not empty"));
  temp_dir empty;
  ck::prepare_dir(empty.path);
  CHECK_THROWS_WITH(ck::read_manifest(empty.path), Catch::Contains("MANIFEST"));
  std::ofstream{fs::path{empty.path} / "MANIFEST"} << "not a manifest";
  CHECK_THROWS_WITH(ck::read_manifest(empty.path), Catch::Contains("manifest"));
}

TEST_CASE("a manifest missing a chunk is refused", "[checkpoint]") {
  temp_dir d;
  ck::prepare_dir(d.path);
  ck::chunk_file f0{"ck", 5, "n0", {record(0, 0, 16, 5), record(0, 2, 8, 5)}};
  ck::write_manifest(d.path, {two_tensor_job(), 5, {ck::write_chunk_file(d.path, f0)}});
  CHECK_THROWS_WITH(ck::read_manifest(d.path),
                    Catch::Contains("no file holds chunk 0/1"));
}

TEST_CASE("a restore names the first spec difference", "[checkpoint]") {
  ck::manifest m{two_tensor_job(), 5, {}};
  auto wanted = two_tensor_job();
  wanted.num_workers = 3; // workers may change
  wanted.optimizer.learning_rate = 0.5f;
  CHECK(ck::restore_mismatch(m, wanted).empty());
  wanted.tensors[1].elements = 17;
  CHECK_THAT(ck::restore_mismatch(m, wanted),
             Catch::Contains("tensor #1") && Catch::Contains("17"));
  wanted = two_tensor_job();
  wanted.optimizer.kind = rw::optimizer_kind::sgd;
  CHECK_THAT(ck::restore_mismatch(m, wanted), Catch::Contains("adam"));
}

TEST_CASE("a chunk's state goes into a checkpoint and back bitwise", "[checkpoint]") {
  const uint32_t len = 16;
  std::vector<float> p(len), m(len), v(len);
  rw::actors::detail::chunk_state cs{len, 2, p.data(), m.data(), v.data(), true};
  auto r = record(0, 1, len, 9);
  CHECK(cs.restore(r).empty());
  CHECK(cs.initialized());
  CHECK(cs.version() == 9);
  auto back = cs.snapshot(0, 1);
  CHECK(back.version == 9);
  CHECK(same_bits(back.params, r.params));
  CHECK(same_bits(back.m, r.m));
  CHECK(same_bits(back.v, r.v));
  auto short_one = record(0, 1, len - 1, 9);
  CHECK_THAT(cs.restore(short_one), Catch::Contains("15 floats"));
  std::vector<float> q(len);
  rw::actors::detail::chunk_state sgd{len, 2, q.data(), nullptr, nullptr, true};
  CHECK_THAT(sgd.restore(r), Catch::Contains("optimizer array m"));
}

} // namespace rw_unit_checkpoint
