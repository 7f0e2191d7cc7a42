// The coordinator's state database (actors/cluster/store): a registry written
// is the registry read back, in every job state; its writer (store_writer) applies
// writes in the order sent and every one sent before its coordinator went; files that are not one, are damaged,
// are held by another process or are readable by others are refused, naming the file.

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/binary_serializer.hpp>
#include <catch2/catch.hpp>
#include <sqlite3.h>

#include "actors/cluster/store.hpp"
#include "actors/cluster/store_writer.hpp"

namespace rw_unit_cluster_store {

using namespace rw;
using namespace rw::actors;
using namespace rw::actors::detail;

namespace {

std::string scratch(const std::string& stem) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path()
             / ("rw-store-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  return (dir / stem).string();
}

stored_job make_job(uint32_t id, const std::string& name, const std::string& state) {
  stored_job j;
  auto& r = j.report;
  r.id = id;
  r.name = name;
  r.state = state;
  r.reason = state == "failed" ? "node rack-b sent no heartbeat for 2000 ms" : "";
  r.node = "rack-a";
  r.endpoints = {"127.0.0.1:7700", "127.0.0.1:7701"};
  r.layout.nodes = {"rack-a", "rack-b"};
  r.layout.addresses = {"127.0.0.1:7700", "127.0.0.1:7710"};
  r.layout.racks = {"a", "b"};
  r.layout.ring_version = 3 + id;
  r.layout.reduction = "hierarchical";
  r.layout.rank_racks = {0, 0, 1, 1};
  r.max_memory = (uint64_t{64} + id) << 20;
  r.layout.plan = "auto: hierarchical; link-bound time per GiB";
  r.layout.join_timeout_ms = 20000;
  r.layout.replicas = id % 2;
  r.spec.name = name;
  r.spec.num_workers = 4;
  r.spec.chunk_bytes = 4096;
  r.spec.optimizer = {optimizer_kind::adam, 1e-3f};
  r.spec.consistency = parse_consistency("ssp:2");
  r.spec.tensors = {{"conv1.w", 9408, true}, {"fc.w", 512000, false}};
  if (id % 3 == 0) // a job whose gradients travel compressed
    r.spec.compression = parse_compression("topk:0.01");
  if (id % 3 == 1) {
    r.spec.compression = parse_compression("fp16");
    r.spec.compression.updates = true;
  }
  if (id % 2 == 1) { // a job whose hyper-parameters changed (rw.job_set)
    rw::hyper_change c;
    c.at_clock = 30 + id;
    c.learning_rate = 1e-4f;
    c.beta2 = 0.99f;
    r.spec.schedule.push_back(c);
  }
  r.created_unix_ms = 1700000000000 + id;
  r.started_unix_ms = state == "created" ? 0 : r.created_unix_ms + 5;
  r.ended_unix_ms = is_ended(state) ? r.created_unix_ms + 50 : 0;
  if (is_ended(state)) {
    r.ranks = {{0, "left", "127.0.0.1:5000", 40, 80, 40, 1024, 2048, 77}};
    r.lateness = {{0, 120, 95, 30000 + id, 40, 0, 0}};
  }
  j.token = "rwt1_" + std::string(63, 'a') + std::to_string(id % 10);
  return j;
}

void check_same(const stored_job& a, const stored_job& b) {
  auto& x = a.report;
  auto& y = b.report;
  CHECK(a.token == b.token);
  CHECK(a.restore == b.restore);
  CHECK(a.checkpoint_every == b.checkpoint_every);
  CHECK(a.checkpoint_dir == b.checkpoint_dir);
  CHECK(a.last_checkpoint == b.last_checkpoint);
  CHECK(a.last_checkpoint_clock == b.last_checkpoint_clock);
  CHECK(x.id == y.id);
  CHECK(x.max_memory == y.max_memory);
  CHECK(x.name == y.name);
  CHECK(x.state == y.state);
  CHECK(x.reason == y.reason);
  CHECK(x.node == y.node);
  CHECK(x.endpoints == y.endpoints);
  CHECK(x.layout.nodes == y.layout.nodes);
  CHECK(x.layout.addresses == y.layout.addresses);
  CHECK(x.layout.racks == y.layout.racks);
  CHECK(x.layout.ring_version == y.layout.ring_version);
  CHECK(x.layout.reduction == y.layout.reduction);
  CHECK(x.layout.rank_racks == y.layout.rank_racks);
  CHECK(x.layout.replicas == y.layout.replicas);
  CHECK(x.layout.plan == y.layout.plan);
  CHECK(x.layout.join_timeout_ms == y.layout.join_timeout_ms);
  CHECK(describe_mismatch(x.spec, y.spec).empty());
  CHECK(x.spec.tensors.size() == y.spec.tensors.size());
  REQUIRE(x.spec.schedule.size() == y.spec.schedule.size());
  for (size_t i = 0; i < x.spec.schedule.size(); ++i) {
    CHECK(x.spec.schedule[i].at_clock == y.spec.schedule[i].at_clock);
    CHECK(x.spec.schedule[i].learning_rate == y.spec.schedule[i].learning_rate);
    CHECK(x.spec.schedule[i].momentum == y.spec.schedule[i].momentum);
    CHECK(x.spec.schedule[i].beta2 == y.spec.schedule[i].beta2);
  }
  CHECK(x.created_unix_ms == y.created_unix_ms);
  CHECK(x.started_unix_ms == y.started_unix_ms);
  CHECK(x.ended_unix_ms == y.ended_unix_ms);
  REQUIRE(x.ranks.size() == y.ranks.size());
  for (size_t i = 0; i < x.ranks.size(); ++i) {
    CHECK(x.ranks[i].state == y.ranks[i].state);
    CHECK(x.ranks[i].clock == y.ranks[i].clock);
    CHECK(x.ranks[i].bytes_out == y.ranks[i].bytes_out);
  }
  REQUIRE(x.lateness.size() == y.lateness.size());
  for (size_t i = 0; i < x.lateness.size(); ++i) {
    CHECK(x.lateness[i].recent_us == y.lateness[i].recent_us);
    CHECK(x.lateness[i].max_us == y.lateness[i].max_us);
    CHECK(x.lateness[i].steps == y.lateness[i].steps);
  }
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream{path, std::ios::binary} << bytes;
  ::chmod(path.c_str(), 0600);
}

} // namespace

TEST_CASE("the state database round-trips the registry in every job state",
          "[cluster_store]") {
  auto path = scratch("state.db");
  std::vector<stored_job> jobs{
    make_job(7, "j-created", "created"),   make_job(8, "j-running", "running"),
    make_job(9, "j-finished", "finished"), make_job(10, "j-failed", "failed"),
    make_job(11, "j-stopped", "stopped"),  make_job(12, "j-gone", "created")};
  // Checkpoints: periodic ones with the newest complete, and a restored job.
  jobs[1].checkpoint_every = 5;
  jobs[1].checkpoint_dir = "/ck/run";
  jobs[1].last_checkpoint = "/ck/run/clock-0000000015";
  jobs[1].last_checkpoint_clock = 15;
  jobs[2].restore = "/ck/old";
  {
    std::string err;
    auto store = cluster_store::open(path, err);
    REQUIRE(store);
    CHECK(err.empty());
    stored_registry empty;
    REQUIRE(store->load(empty, err));
    CHECK(empty.next_job_id == 0);
    CHECK(empty.jobs.empty());
    for (auto& j : jobs)
      REQUIRE(store->save_job(j, j.report.id + 1) == "");
    // A job changes state: the row is replaced, not added.
    jobs[1].report.state = "finished";
    jobs[1].report.ended_unix_ms = 99;
    REQUIRE(store->save_job(jobs[1], 9) == "");
    // Ids taken by creations that failed still count; the counter never goes back.
    REQUIRE(store->save_next_job_id(40) == "");
    REQUIRE(store->save_next_job_id(20) == "");
    REQUIRE(store->remove_job(12) == "");
    jobs.pop_back();
  }
  // Created only for its owner, and so is what SQLite writes beside it.
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  std::string err;
  auto store = cluster_store::open(path, err);
  INFO(err);
  REQUIRE(store);
  stored_registry back;
  REQUIRE(store->load(back, err));
  CHECK(back.next_job_id == 40);
  REQUIRE(back.jobs.size() == jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    check_same(jobs[i], back.jobs[i]);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a state database others may read is refused, naming the file",
          "[cluster_store]") {
  auto path = scratch("state.db");
  std::string err;
  REQUIRE(cluster_store::open(path, err));
  ::chmod(path.c_str(), 0644);
  CHECK_FALSE(cluster_store::open(path, err));
  CHECK_THAT(err, Catch::Contains(path));
  CHECK_THAT(err, Catch::Contains("mode is 0644"));
  CHECK_THAT(err, Catch::Contains("chmod 600"));
  ::chmod(path.c_str(), 0660);
  CHECK_FALSE(cluster_store::open(path, err));
  ::chmod(path.c_str(), 0600);
  err.clear();
  CHECK(cluster_store::open(path, err));
  CHECK(err.empty());
  // A directory that does not exist: said so, nothing created.
  auto missing = path + ".d/state.db";
  CHECK_FALSE(cluster_store::open(missing, err));
  CHECK_THAT(err, Catch::Contains(missing));
  CHECK_THAT(err, Catch::Contains("cannot create it"));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a damaged or foreign state database is refused, never read as empty",
          "[cluster_store]") {
  std::string err;
  // Not a database at all.
  auto junk = scratch("junk.db");
  write_bytes(junk, std::string(8192, '\x5a'));
  CHECK_FALSE(cluster_store::open(junk, err));
  CHECK_THAT(err, Catch::Contains(junk));
  CHECK_THAT(err, Catch::Contains("not a database"));

  // A real database whose pages were overwritten.
  auto damaged = scratch("damaged.db");
  {
    auto store = cluster_store::open(damaged, err);
    REQUIRE(store);
    for (uint32_t id = 1; id <= 200; ++id)
      REQUIRE(
        store->save_job(make_job(id, "job-" + std::to_string(id), "running"), id + 1)
        == "");
  }
  auto size = std::filesystem::file_size(damaged);
  REQUIRE(size > 16384);
  {
    std::fstream f{damaged, std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(4096 + 100);
    std::string noise(8192, '\xa5');
    f.write(noise.data(), static_cast<std::streamsize>(noise.size()));
  }
  err.clear();
  CHECK_FALSE(cluster_store::open(damaged, err));
  CHECK_THAT(err, Catch::Contains(damaged));
  CHECK_THAT(err, Catch::Contains("damaged"));

  std::filesystem::remove_all(std::filesystem::path(junk).parent_path());
  std::filesystem::remove_all(std::filesystem::path(damaged).parent_path());
}

TEST_CASE("a state database another coordinator holds is refused", "[cluster_store]") {
  auto path = scratch("state.db");
  std::string err;
  auto first = cluster_store::open(path, err);
  REQUIRE(first);
  REQUIRE(first->save_job(make_job(1, "a", "created"), 2) == "");
  // Another process holding the file (the exclusive lock is per process: fork).
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::string child_err;
    auto second = cluster_store::open(path, child_err);
    bool said = child_err.find("another coordinator") != std::string::npos
                && child_err.find(path) != std::string::npos;
    _exit(!second && said ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a schema-1 state database is brought to schema 2 and keeps its jobs",
          "[cluster_store]") {
  auto path = scratch("v1.db");
  auto job = make_job(3, "old", "running");
  {
    std::string err;
    auto store = cluster_store::open(path, err);
    REQUIRE(store);
    REQUIRE(store->save_job(job, 4) == "");
  }
  { // As a build before job checkpoints wrote it: no such table, version 1.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    CHECK(sqlite3_exec(
            db, "DROP TABLE job_checkpoints; UPDATE schema_version SET version = 1",
            nullptr, nullptr, nullptr)
          == SQLITE_OK);
    sqlite3_close(db);
  }
  std::string err;
  auto store = cluster_store::open(path, err);
  INFO(err);
  REQUIRE(store);
  stored_registry back;
  REQUIRE(store->load(back, err));
  REQUIRE(back.jobs.size() == 1);
  check_same(job, back.jobs[0]);
  job.checkpoint_every = 2; // and checkpoints can be kept from now on
  job.checkpoint_dir = "/ck";
  REQUIRE(store->save_job(job, 4) == "");
  REQUIRE(store->load(back, err));
  check_same(job, back.jobs[0]);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

namespace {

// job_report as a build before job_layout's `replicas` wrote it.
struct old_layout {
  job_layout* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, old_layout& l) {
  auto& x = *l.x;
  return f(caf::meta::type_name("rw::job_layout"), x.nodes, x.addresses, x.racks,
           x.vnodes, x.ring_version, x.reduction, x.rank_racks, x.plan,
           x.join_timeout_ms);
}
// job_spec as a build before its `schedule` wrote it.
struct old_spec {
  rw::job_spec* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, old_spec& s) {
  auto& x = *s.x;
  return f(caf::meta::type_name("rw::job_spec"), x.name, x.num_workers, x.chunk_bytes,
           x.optimizer, x.tensors, x.consistency);
}
// job_spec as a build before its `compression` wrote it (with its schedule).
struct spec_without_compression {
  rw::job_spec* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spec_without_compression& s) {
  auto& x = *s.x;
  return f(caf::meta::type_name("rw::job_spec"), x.name, x.num_workers, x.chunk_bytes,
           x.optimizer, x.tensors, x.consistency, x.schedule);
}
// The era it was written in: before job_layout's replicas, before job_spec's schedule,
// before job_report's max_memory, before job_spec's compression, before job_report's
// lateness.
enum class era {
  before_replicas,
  before_schedule,
  before_memory,
  before_compression,
  before_lateness
};
struct old_report {
  job_report* x;
  era when = era::before_replicas;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, old_report& r) {
  auto& x = *r.x;
  old_layout layout{&x.layout};
  old_spec spec{&x.spec};
  spec_without_compression uncompressed{&x.spec};
  if (r.when == era::before_lateness)
    return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
             x.node, x.endpoints, x.layout, x.spec, x.created_unix_ms, x.started_unix_ms,
             x.ended_unix_ms, x.ranks, x.max_memory);
  if (r.when == era::before_compression)
    return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
             x.node, x.endpoints, x.layout, uncompressed, x.created_unix_ms,
             x.started_unix_ms, x.ended_unix_ms, x.ranks, x.max_memory);
  if (r.when == era::before_memory)
    return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
             x.node, x.endpoints, x.layout, uncompressed, x.created_unix_ms,
             x.started_unix_ms, x.ended_unix_ms, x.ranks);
  if (r.when == era::before_replicas)
    return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
             x.node, x.endpoints, layout, spec, x.created_unix_ms, x.started_unix_ms,
             x.ended_unix_ms, x.ranks);
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks);
}

// Replaces every stored report with `old`'s encoding.
void store_old(const std::string& path, old_report old) {
  std::vector<char> blob;
  caf::binary_serializer sink{nullptr, blob};
  REQUIRE(!sink(old));
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "UPDATE jobs SET report = ?", -1, &st, nullptr)
          == SQLITE_OK);
  sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  CHECK(sqlite3_step(st) == SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

// Saves `job` (as this build writes it), replaces its report with `old`'s encoding (as
// an older build wrote it) and reads the registry back.
stored_registry read_back_as_old(const std::string& path, stored_job& job,
                                 old_report old) {
  {
    std::string err;
    auto store = cluster_store::open(path, err);
    REQUIRE(store);
    REQUIRE(store->save_job(job, job.report.id + 1) == "");
  }
  store_old(path, old);
  std::string err;
  auto store = cluster_store::open(path, err);
  REQUIRE(store);
  stored_registry back;
  REQUIRE(store->load(back, err));
  REQUIRE(back.jobs.size() == 1);
  return back;
}

} // namespace

TEST_CASE("a job written before replicas existed is read back without replicas",
          "[cluster_store]") {
  auto path = scratch("pre-replicas.db");
  auto job = make_job(5, "older", "running");
  auto saved = job;
  job.report.layout.replicas = 0; // what the older build knew of it
  job.report.spec.schedule.clear();
  job.report.max_memory = 0;
  job.report.spec.compression = {};
  auto back = read_back_as_old(path, saved, old_report{&job.report});
  check_same(job, back.jobs[0]);
  CHECK(back.jobs[0].report.layout.replicas == 0);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a job written before hyper-parameter schedules existed is read back with none",
          "[cluster_store]") {
  auto path = scratch("pre-schedule.db");
  auto job = make_job(7, "older", "running"); // odd: it has a schedule
  REQUIRE(!job.report.spec.schedule.empty());
  auto saved = job;
  job.report.spec.schedule.clear();
  job.report.max_memory = 0;
  job.report.spec.compression = {};
  auto back = read_back_as_old(path, saved,
                               old_report{&job.report, era::before_schedule});
  check_same(job, back.jobs[0]);
  CHECK(back.jobs[0].report.layout.replicas == job.report.layout.replicas);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a job written before memory limits existed is read back with the nodes' limit",
          "[cluster_store]") {
  auto path = scratch("pre-memory.db");
  auto job = make_job(9, "older", "running");
  REQUIRE(job.report.max_memory != 0);
  auto saved = job;
  job.report.max_memory = 0;
  job.report.spec.compression = {};
  auto back = read_back_as_old(path, saved, old_report{&job.report, era::before_memory});
  check_same(job, back.jobs[0]);
  CHECK(back.jobs[0].report.max_memory == 0);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a job written before compression existed is read back as uncompressed",
          "[cluster_store]") {
  auto path = scratch("pre-compression.db");
  auto job = make_job(10, "older", "running"); // 10 % 3 == 1: fp16 with updates
  REQUIRE(job.report.spec.compression.kind == compression_spec::fp16);
  auto saved = job;
  job.report.spec.compression = {};
  auto back = read_back_as_old(path, saved,
                               old_report{&job.report, era::before_compression});
  check_same(job, back.jobs[0]);
  CHECK(back.jobs[0].report.spec.compression.kind == compression_spec::none);
  CHECK(!back.jobs[0].report.spec.compression.updates);
  CHECK(back.jobs[0].report.max_memory == job.report.max_memory);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("a job written before lateness was measured is read back with none measured",
          "[cluster_store]") {
  auto path = scratch("pre-lateness.db");
  auto job = make_job(12, "older", "finished");
  REQUIRE(!job.report.lateness.empty());
  auto saved = job;
  job.report.lateness.clear();
  auto back = read_back_as_old(path, saved,
                               old_report{&job.report, era::before_lateness});
  check_same(job, back.jobs[0]);
  CHECK(back.jobs[0].report.lateness.empty());
  CHECK(back.jobs[0].report.spec.compression.kind == job.report.spec.compression.kind);
  CHECK(back.jobs[0].report.max_memory == job.report.max_memory);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST_CASE("the state database's writer applies writes in order and finishes them after "
          "its coordinator is gone",
          "[cluster_store]") {
  auto path = scratch("state.db");
  std::string err;
  std::shared_ptr<cluster_store> store = cluster_store::open(path, err);
  REQUIRE(store);
  auto jobs_written = 0;
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    std::vector<std::string> answers;
    {
      caf::scoped_actor coordinator{sys};
      auto writer = spawn_store_writer(sys, store, coordinator->address());
      // Each job goes created -> running -> finished; every third one is deleted.
      // Sent without waiting: only the order of the mailbox keeps the last state last.
      for (uint32_t id = 1; id <= 30; ++id)
        for (auto state : {"created", "running", "finished"}) {
          store_write w;
          w.job = make_job(id, "job-" + std::to_string(id), state);
          w.next_job_id = id + 1;
          coordinator->send(writer, w);
        }
      for (uint32_t id = 3; id <= 30; id += 3) {
        store_write w;
        w.what = store_write::kind::remove_job;
        w.job_id = id;
        coordinator->send(writer, w);
      }
      store_write w;
      w.what = store_write::kind::save_next_job_id;
      w.next_job_id = 77;
      // The last write is asked; its answer comes after every write before it.
      coordinator->request(writer, caf::infinite, w)
        .receive([&](std::string& why) { answers.push_back(why); },
                 [&](caf::error& e) { answers.push_back(to_string(e)); });
      // More writes, then the coordinator goes: they are done before the writer quits.
      for (uint32_t id = 31; id <= 40; ++id) {
        store_write late;
        late.job = make_job(id, "late-" + std::to_string(id), "running");
        late.next_job_id = 78;
        coordinator->send(writer, late);
      }
    } // the coordinator is gone; the actor system waits for the writer to quit
    REQUIRE(answers == std::vector<std::string>{""});
    jobs_written = 30 - 10 + 10; // 30, less the 10 deleted, and the 10 late ones
  }
  stored_registry back;
  store.reset();
  auto again = cluster_store::open(path, err);
  INFO(err);
  REQUIRE(again);
  REQUIRE(again->load(back, err));
  CHECK(back.next_job_id == 78);
  REQUIRE(back.jobs.size() == static_cast<size_t>(jobs_written));
  for (auto& j : back.jobs) {
    INFO(j.report.name);
    CHECK((j.report.id > 30 || j.report.id % 3 != 0)); // deleted ones stay deleted
    CHECK(j.report.state == (j.report.id <= 30 ? "finished" : "running"));
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

} // namespace rw_unit_cluster_store
