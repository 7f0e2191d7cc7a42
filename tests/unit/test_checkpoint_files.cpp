// Checkpoint files against whoever else can write the directory, and against manifests
// and chunk files that lie: a link planted at a temporary name is refused (its target
// unchanged), files are 0600 and directories 0700, a linked directory is refused, a
// periodic part never goes over a complete checkpoint, every index a manifest or file
// gives is bounded before use, and a file larger than its chunks can be is refused
// unread.

#include <filesystem>
#include <fstream>
#include <map>

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/rack/state.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/checkpoint/manifest.hpp"
#include "runtime/chunking.hpp"
#include "runtime/ring.hpp"

namespace rw_unit_checkpoint_files {

namespace ck = rw::runtime::checkpoint;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& stem = "files") {
    static int n = 0;
    path = (fs::temp_directory_path()
            / ("rw-ckfiles-" + stem + "-" + std::to_string(::getpid()) + "-"
               + std::to_string(n++)))
             .string();
    fs::remove_all(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

rw::job_spec job() {
  rw::job_spec spec;
  spec.name = "ck";
  spec.num_workers = 2;
  spec.chunk_bytes = 64; // 16 floats
  spec.optimizer.kind = rw::optimizer_kind::adam;
  spec.tensors = {{"a", 40, true}, {"b", 16, false}}; // 3 chunks + 1 chunk
  return spec;
}

ck::chunk_record record(uint32_t t, uint32_t c, uint32_t len, uint64_t version) {
  std::vector<float> xs(len, 1.5f);
  return {t, c, version, xs, xs, xs};
}

// Two files, every chunk once: the sample checkpoint at clock 5.
ck::manifest write_sample(const std::string& dir) {
  ck::prepare_dir(dir);
  ck::chunk_file f0{"ck", 5, "n0", {record(0, 0, 16, 5), record(0, 2, 8, 5)}};
  ck::chunk_file f1{"ck", 5, "n1", {record(0, 1, 16, 5), record(1, 0, 16, 5)}};
  ck::manifest m{
    job(), 5, {ck::write_chunk_file(dir, f0), ck::write_chunk_file(dir, f1)}};
  ck::write_manifest(dir, m);
  return m;
}

} // namespace

TEST_CASE("a link planted at a checkpoint's temporary name is refused, its target is "
          "unchanged",
          "[checkpoint]") {
  temp_dir d, elsewhere{"victim"};
  fs::create_directories(elsewhere.path);
  auto victim = elsewhere.path + "/victim";
  std::ofstream{victim} << "the victim's own content";
  ck::prepare_dir(d.path);
  fs::create_symlink(victim, d.path + "/MANIFEST.tmp");
  CHECK_THROWS_WITH(ck::write_atomic(d.path, "MANIFEST", {1, 2, 3, 4, 5, 6, 7, 8}),
                    Catch::Contains("symbolic link") && Catch::Contains("MANIFEST.tmp"));
  CHECK(slurp(victim) == "the victim's own content");
  CHECK(!fs::exists(d.path + "/MANIFEST"));
  // A dangling link, too: nothing is created at its target.
  fs::create_symlink(elsewhere.path + "/new", d.path + "/chunks-n0.rwck.tmp");
  CHECK_THROWS(ck::write_atomic(d.path, "chunks-n0.rwck", {1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK(!fs::exists(elsewhere.path + "/new"));
}

TEST_CASE("a stale temporary file of our own is replaced", "[checkpoint]") {
  temp_dir d;
  ck::prepare_dir(d.path);
  std::ofstream{d.path + "/MANIFEST.tmp"} << "left by a writer that crashed";
  ck::write_atomic(d.path, "MANIFEST", {1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(fs::file_size(d.path + "/MANIFEST") == 8);
  CHECK(!fs::exists(d.path + "/MANIFEST.tmp"));
}

TEST_CASE("checkpoint files are created 0600 and their directories 0700",
          "[checkpoint]") {
  temp_dir d;
  auto dir = d.path + "/deeper/ck";
  auto m = write_sample(dir);
  CHECK(mode_of(d.path) == 0700);
  CHECK(mode_of(d.path + "/deeper") == 0700);
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir + "/MANIFEST") == 0600);
  for (auto& e : m.files)
    CHECK(mode_of(dir + "/" + e.name) == 0600);
  ck::prepare_part_dir(dir + "/clock-0000000002");
  CHECK(mode_of(dir + "/clock-0000000002") == 0700);
}

TEST_CASE("a checkpoint directory that is a symbolic link is refused", "[checkpoint]") {
  temp_dir real, d;
  fs::create_directories(real.path);
  fs::create_directories(d.path);
  auto link = d.path + "/ck";
  fs::create_symlink(real.path, link);
  CHECK_THROWS_WITH(ck::prepare_dir(link), Catch::Contains("symbolic link"));
  CHECK_THROWS_WITH(ck::prepare_part_dir(link), Catch::Contains("symbolic link"));
  CHECK(fs::is_empty(real.path));
}

TEST_CASE("a periodic checkpoint's directory is shared by the job's nodes, never written "
          "over once complete",
          "[checkpoint]") {
  temp_dir d;
  auto dir = d.path + "/clock-0000000004";
  ck::prepare_part_dir(dir);
  std::ofstream{dir + "/chunks-n1.rwck"} << "another node's part";
  CHECK_NOTHROW(ck::prepare_part_dir(dir)); // the next node of the same checkpoint
  write_sample(d.path + "/done");
  CHECK_THROWS_WITH(ck::prepare_part_dir(d.path + "/done"),
                    Catch::Contains("complete checkpoint")
                      && Catch::Contains("another run"));
}

TEST_CASE("a manifest naming a chunk or tensor the job does not have is refused",
          "[checkpoint]") {
  for (auto bad :
       {std::pair<uint32_t, uint32_t>{0, 1000000000}, {0, 3}, {2, 0}, {7, 1}}) {
    temp_dir d;
    auto m = write_sample(d.path);
    m.files[1].chunks.push_back(bad);
    ck::write_manifest(d.path, m); // over the sample's
    INFO("chunk " << bad.first << "/" << bad.second);
    CHECK_THROWS_WITH(ck::read_manifest(d.path),
                      Catch::Contains(fmt::format("{}/{}", bad.first, bad.second))
                        || Catch::Contains(fmt::format("tensor #{}", bad.first)));
  }
}

TEST_CASE("a restore whose manifest names chunk 1e9 is refused before the routing table "
          "sees it",
          "[checkpoint]") {
  temp_dir d;
  auto m = write_sample(d.path);
  m.files[0].chunks.push_back({0, 1000000000});
  fs::remove(d.path + "/MANIFEST");
  ck::write_manifest(d.path, m);
  rw::runtime::hash_ring ring{{"n0", "n1"}};
  rw::runtime::routing_table routes{job(), 2, {}, &ring, 1};
  std::vector<std::vector<ck::chunk_record>> per_shard;
  auto why = rw::actors::detail::load_restore(d.path, job(), routes, per_shard);
  CHECK_THAT(why, Catch::Contains("chunk 0/1000000000") && Catch::Contains("3 chunks"));
}

TEST_CASE("a manifest whose tensors make more chunks than any job may is refused",
          "[checkpoint]") {
  temp_dir d;
  auto m = write_sample(d.path);
  m.spec.tensors[1].elements = uint64_t{1} << 40;
  fs::remove(d.path + "/MANIFEST");
  ck::write_manifest(d.path, m);
  CHECK_THROWS_WITH(ck::read_manifest(d.path), Catch::Contains("no job could have"));
}

TEST_CASE("a chunk file larger than its chunks can be is refused unread",
          "[checkpoint]") {
  temp_dir d;
  auto m = write_sample(d.path);
  // The file padded to 3 MiB and the manifest made to agree (size and checksum): its
  // four chunks of at most 16 floats cannot take that much.
  auto path = d.path + "/" + m.files[0].name;
  auto bytes = slurp(path);
  bytes.resize(3 << 20, '\0');
  fs::permissions(path, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream{path, std::ios::binary | std::ios::trunc} << bytes;
  std::vector<uint8_t> raw(bytes.begin(), bytes.end());
  m.files[0].bytes = raw.size();
  m.files[0].xxh64 = ck::checksum(raw);
  fs::remove(d.path + "/MANIFEST");
  ck::write_manifest(d.path, m);
  auto read = ck::read_manifest(d.path);
  CHECK_THROWS_WITH(ck::read_chunk_file(d.path, read, read.files[0]),
                    Catch::Contains("refused unread"));
  CHECK_NOTHROW(ck::read_chunk_file(d.path, read, read.files[1]));
  // read_all itself: no more than the caller allows, whatever the file holds.
  CHECK_THROWS_WITH(ck::read_all(d.path, m.files[0].name, 1024),
                    Catch::Contains("refused"));
}

TEST_CASE("a chunk file reached through a symbolic link is refused", "[checkpoint]") {
  temp_dir d, elsewhere{"moved"};
  auto m = write_sample(d.path);
  fs::create_directories(elsewhere.path);
  auto moved = elsewhere.path + "/" + m.files[0].name;
  fs::rename(d.path + "/" + m.files[0].name, moved);
  fs::create_symlink(moved, d.path + "/" + m.files[0].name);
  auto read = ck::read_manifest(d.path);
  CHECK_THROWS_WITH(ck::read_chunk_file(d.path, read, read.files[0]),
                    Catch::Contains("symbolic link"));
}

TEST_CASE("a chunk file's records must be the chunks its manifest entry lists, each of "
          "its chunk's length",
          "[checkpoint]") {
  auto check = [](ck::chunk_file f, const std::string& reason) {
    temp_dir d;
    auto m = write_sample(d.path);
    fs::remove(d.path + "/" + m.files[0].name);
    auto e = ck::write_chunk_file(d.path, f);
    e.chunks = m.files[0].chunks; // the manifest lists what n0 should hold
    m.files[0] = e;
    fs::remove(d.path + "/MANIFEST");
    ck::write_manifest(d.path, m);
    auto read = ck::read_manifest(d.path);
    INFO(reason);
    CHECK_THROWS_WITH(ck::read_chunk_file(d.path, read, read.files[0]),
                      Catch::Contains(reason));
  };
  check({"ck", 5, "n0", {record(0, 0, 15, 5), record(0, 2, 8, 5)}}, "15/15/15 floats");
  check({"ck", 5, "n0", {record(0, 0, 16, 5), record(0, 1, 16, 5)}}, "does not list");
  check({"ck", 5, "n0", {record(0, 0, 16, 5)}}, "holds 1 chunks, the manifest lists 2");
}

} // namespace rw_unit_checkpoint_files
