// Checkpoint paths confined to --checkpoint-root: without a root none is taken; with one,
// a relative path is taken under it, and an absolute path elsewhere, a '..' or a
// symbolic link that leads out is refused with the reason; what is taken comes back
// canonical.

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "runtime/checkpoint/root.hpp"

namespace rw_unit_checkpoint_root {

namespace ck = rw::runtime::checkpoint;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& stem) {
    static int n = 0;
    path = (fs::canonical(fs::temp_directory_path())
            / ("rw-ckroot-" + stem + "-" + std::to_string(::getpid()) + "-"
               + std::to_string(n++)))
             .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("without --checkpoint-root no checkpoint path is taken", "[checkpoint]") {
  ck::checkpoint_root none;
  CHECK(!none.configured());
  CHECK_THROWS_WITH(none.resolve("/tmp/ck", "checkpoint: the directory"),
                    Catch::Contains("no --checkpoint-root") && Catch::Contains("/tmp/ck")
                      && Catch::Contains("--checkpoint-root DIR"));
}

TEST_CASE("a checkpoint root must be an existing directory", "[checkpoint]") {
  temp_dir d{"root"};
  CHECK_THROWS_WITH(ck::checkpoint_root{d.path + "/absent"},
                    Catch::Contains("--checkpoint-root") && Catch::Contains("absent"));
  std::ofstream{d.path + "/file"} << "x";
  CHECK_THROWS_WITH(ck::checkpoint_root{d.path + "/file"},
                    Catch::Contains("not an existing directory"));
}

TEST_CASE("checkpoint paths resolve under the root, outside it they are refused with the "
          "reason",
          "[checkpoint]") {
  temp_dir d{"root"}, elsewhere{"elsewhere"};
  ck::checkpoint_root root{d.path};
  CHECK(root.path() == d.path);
  // Inside: relative, absolute, not yet existing, the root itself, '..' that stays in.
  CHECK(root.resolve("run-1/ck", "restore") == d.path + "/run-1/ck");
  CHECK(root.resolve(d.path + "/a/b", "restore") == d.path + "/a/b");
  CHECK(root.resolve(d.path, "restore") == d.path);
  CHECK(root.resolve("a/../b/./c/", "restore") == d.path + "/b/c");
  fs::create_directories(d.path + "/x/y");
  CHECK(root.resolve(d.path + "/x/y/../z", "restore") == d.path + "/x/z");
  // Outside: elsewhere, '..' out (existing or not), a link out (to an existing
  // directory or through one to a path not made yet).
  auto refused = [&](const std::string& path) {
    INFO(path);
    CHECK_THROWS_WITH(
      root.resolve(path, "checkpoint_dir"),
      Catch::Contains("checkpoint_dir '" + path + "' refused")
        && Catch::Contains("outside this node's --checkpoint-root '" + d.path + "'"));
  };
  refused(elsewhere.path + "/ck");
  refused("../x");
  refused("new/../../x");
  refused(d.path + "/x/../../" + fs::path{elsewhere.path}.filename().string());
  refused("/");
  fs::create_symlink(elsewhere.path, d.path + "/out");
  refused("out");
  refused("out/ck");
  refused(d.path + "/out/deeper/ck");
  // A link that stays inside is followed, and the canonical path is what comes back.
  fs::create_symlink(d.path + "/x", d.path + "/in");
  CHECK(root.resolve("in/ck", "restore") == d.path + "/x/ck");
  // A link that leads nowhere is refused.
  fs::create_symlink(d.path + "/missing", d.path + "/dangling");
  CHECK_THROWS_WITH(root.resolve("dangling/ck", "restore"),
                    Catch::Contains("cannot be resolved"));
  CHECK_THROWS_WITH(root.resolve("", "restore"), Catch::Contains("give a directory"));
}

TEST_CASE(
  "a checkpoint root whose name prefixes another directory does not take that directory",
  "[checkpoint]") {
  temp_dir d{"prefix"};
  fs::create_directories(d.path + "/ck");
  fs::create_directories(d.path + "/ck-other");
  ck::checkpoint_root root{d.path + "/ck"};
  CHECK_THROWS_WITH(root.resolve(d.path + "/ck-other/run", "restore"),
                    Catch::Contains("outside"));
}

} // namespace rw_unit_checkpoint_root
