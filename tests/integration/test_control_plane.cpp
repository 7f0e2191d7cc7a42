// The control plane's exposure and the checkpoint paths it may name. Without a cluster
// secret rw-node refuses a control port or --listen address other hosts reach (exit 2,
// saying what to do) unless --insecure, with which it starts and warns once. Checkpoint
// and restore paths must lie under --checkpoint-root: the coordinator refuses the rest
// with the reason (a Lua error for the shell, a log line for the operator), and a node
// refuses what lies outside its own root even when the coordinator's took it.

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "tests/support/cluster_fixture.hpp"

namespace rw_integration_control_plane {

using namespace rw;
namespace fs = std::filesystem;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

struct scratch {
  std::string path = testing::scratch_dir("ckroot");
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("without a cluster secret rw-node refuses a control port or listen address "
          "beyond loopback unless --insecure",
          "[integration][cli][secret]") {
  auto wild = testing::node_that_stops({"--control", "0.0.0.0:0"});
  INFO(wild.log);
  CHECK(wild.code == std::optional<int>{2});
  CHECK_THAT(wild.log, Catch::Contains("bad configuration: no --cluster-secret-file")
                         && Catch::Contains("the control port 0.0.0.0:0")
                         && Catch::Contains("--cluster-secret-file FILE")
                         && Catch::Contains("loopback") && Catch::Contains("--insecure"));
  auto listen = testing::node_that_stops({"--listen", "0.0.0.0:0"});
  INFO(listen.log);
  CHECK(listen.code == std::optional<int>{2});
  CHECK_THAT(listen.log, Catch::Contains("--listen 0.0.0.0:0"));
  // With --insecure it starts, and says once what is open.
  testing::node_process open{{"--control", "0.0.0.0:0", "--insecure"}};
  CHECK(open.wait_for_log("node up", std::chrono::seconds(10)));
  CHECK(count_of(open.log(), "--insecure: no cluster secret") == 1);
  CHECK_THAT(open.log(), Catch::Contains("the control port 0.0.0.0:0"));
  // On loopback, nothing to refuse or warn about.
  testing::node_process local;
  CHECK(count_of(local.log(), "--insecure") == 0);
}

TEST_CASE("checkpoint and restore paths outside --checkpoint-root are refused with the "
          "reason",
          "[integration][checkpoint]") {
  scratch root, elsewhere;
  fs::create_symlink(elsewhere.path, root.path + "/out");
  testing::node_process node{{"--name", "n0", "--checkpoint-root", root.path},
                             {"rack-agg", false, {}}};
  auto shell = [&](const std::string& code) {
    return testing::run_shell({"--connect", node.address(), "-c", code});
  };
  auto made = shell(
    "print(rw.job_create{name = 'j', workers = 1, optimizer = 'sgd', "
    "lr = 0.1, node = 'n0', checkpoint_every = 5, checkpoint_dir = 'periodic'}"
    ".token ~= nil)");
  INFO(made.err);
  REQUIRE(made.out == "true\n");
  CHECK(fs::is_directory(root.path + "/periodic")); // relative: under the root
  CHECK((fs::status(root.path + "/periodic").permissions() & fs::perms::all)
        == fs::perms::owner_all);
  for (auto dir : {elsewhere.path + "/ck", std::string{"../x"}, std::string{"out/ck"},
                   root.path + "/out"}) {
    auto r = shell("rw.checkpoint('j', '" + dir + "')");
    INFO(dir << ": " << r.err);
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("'" + dir + "' refused")
                        && Catch::Contains("outside this node's --checkpoint-root"));
  }
  CHECK(node.wait_for_log("checkpoint refused: job='j'"));
  CHECK(fs::is_empty(elsewhere.path));
  auto restore = shell(
    "rw.job_create{name = 'r', workers = 1, optimizer = 'sgd', lr = 0.1, node = 'n0', "
    "restore = '"
    + elsewhere.path + "'}");
  CHECK(restore.code == 1);
  CHECK_THAT(restore.err, Catch::Contains("restore '" + elsewhere.path + "' refused"));
  auto periodic = shell(
    "rw.job_create{name = 'p', workers = 1, optimizer = 'sgd', lr = 0.1, "
    "node = 'n0', checkpoint_every = 5, checkpoint_dir = '../p'}");
  CHECK(periodic.code == 1);
  CHECK_THAT(periodic.err, Catch::Contains("checkpoint_dir '../p' refused"));
  CHECK(node.wait_for_log("job not created: job='p'"));

  // A node without a root takes no checkpoint path at all.
  testing::node_process bare{{"--name", "n1", "--checkpoint-root", ""},
                             {"rack-agg", false, {}}};
  auto none = testing::run_shell(
    {"--connect", bare.address(), "-c",
     "rw.job_create{name = 'q', workers = 1, optimizer = 'sgd', lr = 0.1, "
     "node = 'n1', checkpoint_dir = '"
       + root.path + "/q'}"});
  CHECK(none.code == 1);
  CHECK_THAT(none.err, Catch::Contains("no --checkpoint-root")
                         && Catch::Contains("--checkpoint-root DIR"));
}

TEST_CASE("a node writes checkpoints only under its own --checkpoint-root, whatever the "
          "coordinator's takes",
          "[integration][checkpoint]") {
  scratch wide;
  fs::create_directories(wide.path + "/node");
  testing::node_process coord{{"--name", "coord", "--checkpoint-root", wide.path},
                              {"coordinator", false, {}}};
  testing::node_process member{{"--name", "m0", "--checkpoint-root", wide.path + "/node"},
                               {"rack-agg", false, coord.address()}};
  REQUIRE(coord.wait_for_log("1 node(s) live", std::chrono::seconds(15)));
  auto r = testing::run_shell(
    {"--connect", coord.address(), "-c",
     "rw.job_create{name = 'k', workers = 1, optimizer = 'sgd', lr = 0.1, "
     "node = 'm0', checkpoint_every = 5, checkpoint_dir = '"
       + wide.path + "/coordinators-only'}"});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("node m0: checkpoint_dir")
                      && Catch::Contains("outside this node's --checkpoint-root '"
                                         + wide.path + "/node'"));
  CHECK(member.wait_for_log("job refused: job='k'"));
}

} // namespace rw_integration_control_plane
