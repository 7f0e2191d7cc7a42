// The coordinator's tenants file (runtime/tenants.hpp) over any file: it yields tenants
// that hold up (a valid name, a secret of 16+ characters that is nobody else's, quotas
// of 1 or more) or throws std::runtime_error naming the problem. Secret files the inputs
// may name: /tmp/rw-fuzz-tenants/{a,b}.secret (0600), open.secret (0644), short.secret,
// made at start; any other path is what it is (a directory, a device, nothing).

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include "runtime/tenants.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

const char* const cluster_secret = "the-cluster-secret-0123456789";

bool make_secrets() {
  const std::string dir = "/tmp/rw-fuzz-tenants";
  mkdir(dir.c_str(), 0700);
  auto write = [&](const char* name, const char* text, mode_t mode) {
    auto path = dir + "/" + name;
    std::ofstream{path, std::ios::trunc} << text << "\n";
    chmod(path.c_str(), mode);
  };
  write("a.secret", "tenant-a-secret-0123456789", 0600);
  write("b.secret", "tenant-b-secret-0123456789", 0600);
  write("open.secret", "tenant-open-secret-0123456789", 0644);
  write("short.secret", "short", 0600);
  write("cluster.secret", cluster_secret, 0600);
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool ready = make_secrets();
  (void)ready;
  rw::fuzz::input_file file{data, size};
  const auto& path = file.path;
  try {
    auto tenants = rw::runtime::load_tenants(path, cluster_secret);
    std::set<std::string> secrets;
    for (auto& [name, t] : tenants) {
      if (name != t.name || !rw::runtime::tenant_name_error(name).empty())
        rw::fuzz::fail("a tenant with a bad name was taken: " + name);
      if (t.secret.size() < 16 || t.secret == cluster_secret
          || !secrets.insert(t.secret).second)
        rw::fuzz::fail("tenant " + name
                       + " was taken with a short, shared or cluster secret");
      if ((t.max_jobs && *t.max_jobs == 0) || (t.max_workers && *t.max_workers == 0)
          || (t.max_memory_bytes && *t.max_memory_bytes == 0))
        rw::fuzz::fail("tenant " + name + " was taken with a quota of 0");
    }
  } catch (const std::runtime_error& e) {
    if (std::string{e.what()}.empty())
      rw::fuzz::fail("a refused tenants file comes without a reason");
  }
  return 0;
}
