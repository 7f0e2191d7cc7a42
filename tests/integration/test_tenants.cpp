// Tenants (runtime/tenants.hpp): a shell that proves a tenant's secret at the tenant door
// sees and controls only that tenant's jobs, named TENANT:NAME, within its quotas;
// operators (the cluster secret) see everything; a job's memory reservation holds on
// its node. The door's protocol against hostile clients: test_tenant_door.cpp.

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "tests/support/cluster_fixture.hpp"
#include "tests/support/rack_cluster.hpp"

namespace rw_integration_tenants {

using namespace rw;

namespace {

struct tenant_files {
  std::string dir = testing::scratch_dir("tenants");
  std::string cluster = write("cluster.secret", "the-cluster-secret-0123456789");
  std::string vision = write("vision.secret", "vision-team-secret-0123456789");
  std::string speech = write("speech.secret", "speech-team-secret-0123456789");
  std::string wrong = write("wrong.secret", "not-a-tenant-secret-0123456789");
  std::string tenants = write("tenants.toml",
                              "[vision]\nsecret_file = 'vision.secret'\nmax_jobs = 2\n"
                              "max_workers = 4\nmax_memory_mib = 64\n\n"
                              "[speech]\nsecret_file = 'speech.secret'\n");
  ~tenant_files() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    auto path = dir + "/" + name;
    std::ofstream{path} << text << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_read
                                         | std::filesystem::perms::owner_write);
    return path;
  }
};

// The fixture's job (rw-test-worker's spec), with `more` fields.
std::string create(const std::string& name, int workers, const std::string& more = {}) {
  return "local j = rw.job_create{name = '" + name
         + "', workers = " + std::to_string(workers)
         + ", optimizer = 'sum', lr = 0.05, momentum = 0.9, weight_decay = 0, "
           "chunk_bytes = "
           "'4KiB'"
         + (more.empty() ? "" : ", " + more) + "}; ";
}

} // namespace

TEST_CASE("a tenant sees and controls only its own jobs, within its quotas",
          "[integration][cluster][tenants]") {
  tenant_files f;
  testing::cluster c{{"--cluster-secret-file", f.cluster, "--tenants-file", f.tenants},
                     {"--cluster-secret-file", f.cluster}};
  REQUIRE(c.coordinator().wait_for_log("2 tenant(s) from"));
  auto as = [&](const std::string& tenant, const std::string& secret,
                const std::string& code) {
    return testing::run_shell({"--connect", c.a().address(), "--tenant", tenant,
                               "--tenant-secret-file", secret, "-c", code});
  };
  auto vision = [&](const std::string& code) { return as("vision", f.vision, code); };
  auto speech = [&](const std::string& code) { return as("speech", f.speech, code); };
  auto operator_ = [&](const std::string& code) {
    return testing::run_shell(
      {"--connect", c.a().address(), "--cluster-secret-file", f.cluster, "-c", code});
  };

  // A tenant's job lives in its namespace, reserves memory from its quota.
  auto made = vision(create("m", 2, "memory = '8MiB'")
                     + "print(j.name, j.memory, j.token, j.endpoints[1])");
  INFO(made.err);
  REQUIRE(made.code == 0);
  std::istringstream fields{made.out};
  std::string name, memory, token, endpoint;
  fields >> name >> memory >> token >> endpoint;
  CHECK(name == "vision:m");
  CHECK(memory == std::to_string(8u << 20));
  CHECK(
    vision("print(#rw.jobs(), rw.job_status('m').name, rw.job_status('vision:m').state)")
      .out
    == "1\tvision:m\tcreated\n");

  // Another tenant neither sees nor touches it, and may use the same short name.
  auto theirs = speech("print(#rw.jobs())");
  INFO(theirs.err);
  CHECK(theirs.out == "0\n");
  for (auto call :
       {"rw.job_status('vision:m')", "rw.job_stop('vision:m')",
        "rw.job_delete('vision:m')",
        "rw.job_set{name = 'vision:m', at_clock = 5, lr = 1}", "rw.job_status('m')"}) {
    auto r = speech(call);
    INFO(call << ": " << r.err);
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("in tenant 'speech'") && Catch::Contains("no job"));
  }
  CHECK(speech(create("m", 1) + "print(j.name)").out == "speech:m\n");
  auto squat = speech(create("vision:x", 1));
  CHECK(squat.code == 1);
  CHECK_THAT(squat.err, Catch::Contains("its own namespace"));

  // Operators' calls are refused to tenants, saying so (the shell knows; the door would
  // refuse their op numbers too: test_tenant_door.cpp).
  for (auto call : {"rw.node_drain('rack-a')", "rw.node_join('rack-a')",
                    "rw.checkpoint('m', '/tmp/x')",
                    "rw.inject{job = 'm', kill = 'shard', shard = 0}"}) {
    auto r = vision(call);
    INFO(call << ": " << r.err);
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("an operator's call"));
  }
  auto paths = vision(create("p", 1,
                             "memory = '1MiB', checkpoint_every = 5, "
                             "checkpoint_dir = '/tmp/rw-tenant-ck'"));
  CHECK_THAT(paths.err, Catch::Contains("cannot name checkpoint directories"));

  // Quotas: memory must be asked for, and fit; workers; live jobs.
  auto no_memory = vision(create("n", 1));
  CHECK(no_memory.code == 1);
  CHECK_THAT(no_memory.err, Catch::Contains("memory = '512MiB'")
                              && Catch::Contains("56 MiB of its 64 MiB left"));
  auto too_big = vision(create("n", 1, "memory = '57MiB'"));
  CHECK(too_big.code == 1);
  CHECK_THAT(too_big.err,
             Catch::Contains("has 56 MiB of its max_memory_mib 64 MiB left"));
  // A job holds its memory on each of its nodes: two nodes of 30 MiB do not fit in 56
  // (it was once counted once).
  auto spread = vision(create("w", 2, "memory = '30MiB', nodes = {'rack-a', 'rack-b'}"));
  CHECK(spread.code == 1);
  CHECK_THAT(spread.err,
             Catch::Contains("asks for 30 MiB of memory on each of its 2 nodes "
                             "(60 MiB in all)"));
  auto too_many_workers = vision(create("n", 3, "memory = '8MiB'"));
  CHECK(too_many_workers.code == 1);
  CHECK_THAT(too_many_workers.err, Catch::Contains("wants 3 workers")
                                     && Catch::Contains("has 2 of its max_workers 4"));
  CHECK(vision(create("n", 2, "memory = '8MiB'") + "print(j.name)").out == "vision:n\n");
  auto third = vision(create("o", 1, "memory = '8MiB'"));
  CHECK(third.code == 1);
  CHECK_THAT(third.err, Catch::Contains("has 2 live job(s), its max_jobs")
                          && Catch::Contains("vision:m, vision:n"));
  // A stopped job gives its share back.
  CHECK(vision("print(rw.job_stop('n').state)").out == "stopped\n");
  CHECK(vision(create("o", 1, "memory = '8MiB'") + "print(j.name)").out == "vision:o\n");

  // An operator sees every job.
  CHECK(operator_("print(#rw.jobs())").out == "4\n");
  CHECK(operator_("print(rw.job_status('vision:m').state)").out == "created\n");

  // A wrong secret, or a tenant nobody configured: not admitted.
  for (auto [tenant, secret] : {std::pair{"vision", f.wrong}, std::pair{"audio", f.wrong},
                                std::pair{"speech", f.vision}}) {
    auto r = as(tenant, secret, "print(#rw.jobs())");
    INFO(tenant << ": " << r.err);
    CHECK(r.code == 1); // reached and refused: the operation failed (3: unreachable)
    CHECK_THAT(r.err, Catch::Contains("do not match"));
  }

  // A name no tenant can have: said before anything is sent (exit 2, usage).
  auto bad_name = as("Vision:x", f.vision, "print(1)");
  CHECK(bad_name.code == 2);
  CHECK_THAT(bad_name.err, Catch::Contains("--tenant: a tenant's name has only"));

  // The reservation holds on the node: a worker whose tensors need more is refused,
  // and the job trains with workers that fit.
  auto big = testing::start_verified(
    endpoint, name, 0, token,
    {"--optimizer", "sum", "--steps", "3", "--extra-elements", "4194304"});
  auto [code, out] = testing::finish(*big);
  CHECK(code != std::optional<int>{0});
  CHECK_THAT(out, Catch::Contains("created with memory = 8 MiB"));
  std::vector<std::unique_ptr<testing::worker_process>> ws;
  for (uint32_t rank = 0; rank < 2; ++rank)
    ws.push_back(testing::start_verified(endpoint, name, rank, token,
                                         {"--optimizer", "sum", "--steps", "3"}));
  testing::check_all_verified(ws);
}

TEST_CASE("tenants need a cluster secret", "[integration][cluster][tenants]") {
  tenant_files f;
  auto stopped = testing::node_that_stops({"--tenants-file", f.tenants});
  REQUIRE(stopped.code.has_value());
  CHECK(*stopped.code == 1);
  CHECK_THAT(stopped.log, Catch::Contains("--tenants-file needs --cluster-secret-file"));
  // A bad tenants file stops the coordinator too, naming the file and the tenant.
  auto bad = f.write("bad.toml",
                     "[vision]\nsecret_file = 'vision.secret'\nmax_jobs = 0\n");
  auto refused = testing::node_that_stops(
    {"--cluster-secret-file", f.cluster, "--tenants-file", bad});
  // Read as the configuration is (the control plane's TLS admits the tenants): exit 2.
  REQUIRE(refused.code.has_value());
  CHECK(*refused.code == 2);
  CHECK_THAT(refused.log, Catch::Contains("bad configuration:")
                            && Catch::Contains("bad.toml: tenant 'vision': 'max_jobs'"));
}

} // namespace rw_integration_tenants
