// Tenants: the file the coordinator reads them from (runtime/tenants.hpp). Their proofs
// at the tenant door: test_tenant_door.cpp.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "runtime/credentials.hpp"
#include "runtime/tenants.hpp"

namespace rw_unit_tenants {

using namespace rw::runtime;

namespace {

const std::string cluster_secret = "the-cluster-secret-0123456789";

// A scratch directory with secret files a.secret, b.secret (0600) and open.secret (0644).
struct scratch {
  std::string dir;
  scratch() {
    dir = (std::filesystem::temp_directory_path()
           / ("rw-tenants-" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(dir + "/keys");
    secret("keys/a.secret", "tenant-a-secret-0123456789", 0600);
    secret("keys/b.secret", "tenant-b-secret-0123456789", 0600);
    secret("keys/same-as-a.secret", "tenant-a-secret-0123456789", 0600);
    secret("keys/cluster.secret", cluster_secret, 0600);
    secret("keys/open.secret", "tenant-open-secret-0123456789", 0644);
    secret("keys/short.secret", "too-short", 0600);
    secret("keys/endless.secret", std::string(5000, 'x'),
           0600); // no line break (but the last)
  }
  ~scratch() { std::filesystem::remove_all(dir); }
  void secret(const std::string& name, const std::string& text, mode_t mode) {
    auto path = dir + "/" + name;
    std::ofstream{path} << text << "\n";
    ::chmod(path.c_str(), mode);
  }
  std::string file(const std::string& text) {
    auto path = dir + "/tenants.toml";
    std::ofstream{path, std::ios::trunc} << text;
    return path;
  }
};

} // namespace

TEST_CASE("a tenants file gives each tenant its secret and quotas", "[tenants]") {
  scratch s;
  auto path = s.file(R"(
[vision]
secret_file = "keys/a.secret"   # relative to the file
max_jobs = 2
max_workers = 8
max_memory_mib = 512

[speech-2]
secret_file = ")" + s.dir
                     + R"(/keys/b.secret"
)");
  auto t = load_tenants(path, cluster_secret);
  REQUIRE(t.size() == 2);
  auto& v = t.at("vision");
  CHECK(v.name == "vision");
  CHECK(v.secret == "tenant-a-secret-0123456789");
  CHECK(v.max_jobs == std::optional<uint32_t>{2});
  CHECK(v.max_workers == std::optional<uint32_t>{8});
  CHECK(v.max_memory_bytes == std::optional<uint64_t>{uint64_t{512} << 20});
  auto& sp = t.at("speech-2");
  CHECK(sp.secret == "tenant-b-secret-0123456789");
  CHECK_FALSE(sp.max_jobs); // left out: no limit
  CHECK_FALSE(sp.max_workers);
  CHECK_FALSE(sp.max_memory_bytes);
  CHECK(load_tenants(s.file(""), cluster_secret).empty());
}

TEST_CASE("a tenants file with anything wrong is refused, saying what", "[tenants]") {
  scratch s;
  auto refused = [&](const std::string& text, const std::string& says) {
    INFO(text);
    CHECK_THROWS_WITH(load_tenants(s.file(text), cluster_secret),
                      Catch::Contains(says) && Catch::Contains("tenants.toml"));
  };
  refused("[Vision]\nsecret_file = 'keys/a.secret'\n", "lower-case letters");
  refused("vision = 3\n", "must be a table");
  refused("[vision]\nsecret_file = 'keys/a.secret'\nmax_job = 2\n",
          "unknown key 'max_job'");
  refused("[vision]\nmax_jobs = 2\n", "needs secret_file");
  refused("[vision]\nsecret_file = 'keys/a.secret'\nmax_jobs = 0\n", "from 1 to");
  refused("[vision]\nsecret_file = 'keys/a.secret'\nmax_workers = -3\n", "max_workers");
  refused("[vision]\nsecret_file = 'keys/a.secret'\nmax_memory_mib = '1GiB'\n",
          "max_memory_mib");
  refused("[vision]\nsecret_file = 'keys/a.secret'\nmax_jobs = 4.2e24\n", "whole number");
  refused("[vision]\nsecret_file = 'keys/a.secret'\n[speech]\nsecret_file = "
          "'keys/same-as-a.secret'\n",
          "give each tenant its own");
  refused("[vision]\nsecret_file = 'keys/cluster.secret'\n", "is the cluster secret");
  refused("[vision\n", "tenants.toml:1");
  // The secret files' own checks, naming the tenant.
  refused("[vision]\nsecret_file = 'keys/open.secret'\n", "open to other users");
  refused("[vision]\nsecret_file = 'keys/short.secret'\n", "shorter than 16");
  refused("[vision]\nsecret_file = 'keys/none.secret'\n",
          "cannot read the tenant 'vision' secret file");
  refused("[vision]\nsecret_file = '/dev/zero'\n", "is not a regular file");
  refused("[vision]\nsecret_file = 'keys'\n", "is not a regular file");
  refused("[vision]\nsecret_file = 'keys/endless.secret'\n",
          "no line break in its first 4096");
}

TEST_CASE("a job's tenant is what comes before ':'", "[tenants]") {
  CHECK(tenant_of("vision:resnet") == "vision");
  CHECK(tenant_of("resnet").empty());
  CHECK(tenant_of("vision:a:b") == "vision");
  CHECK(tenant_name_error("vision").empty());
  CHECK_FALSE(tenant_name_error("").empty());
  CHECK_FALSE(tenant_name_error(std::string(33, 'a')).empty());
  CHECK_FALSE(tenant_name_error("a:b").empty());
}

} // namespace rw_unit_tenants
