#include "actors/cluster/store.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

namespace rw::actors::detail {

namespace {

// A job's report is kept as CAF's binary form of rw::job_report (its inspect overload
// in cluster_messages.hpp): a change there is a change of schema version, or (as for
// job_layout's replicas, added at the end of its fields) a fallback in decode().
const char* schema_sql = R"(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  state TEXT NOT NULL,
  token TEXT NOT NULL,
  report BLOB NOT NULL
);
)";

// Schema 2: each job's checkpoints (a row only for a job that has any).
const char* checkpoints_sql = R"(
CREATE TABLE job_checkpoints (
  id INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
  restore TEXT NOT NULL,
  every INTEGER NOT NULL,
  dir TEXT NOT NULL,
  last TEXT NOT NULL,
  last_clock INTEGER NOT NULL
);
)";

// Statements are few and short-lived: prepared per call, finalized on every path.
struct statement {
  sqlite3_stmt* s = nullptr;
  ~statement() { sqlite3_finalize(s); }
};

std::string errno_text() {
  return std::strerror(errno);
}

// Whether the file (if it exists) may be opened: a regular file only its owner can
// read and write. Creates it 0600 when missing. "" if fine, else why not.
std::string check_or_create(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return fmt::format("cannot read it: {}", errno_text());
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
      return fmt::format("cannot create it: {}", errno_text());
    ::close(fd);
    return {};
  }
  if (!S_ISREG(st.st_mode))
    return "it is not a regular file";
  if ((st.st_mode & 0077) != 0)
    return fmt::format("its mode is {:04o}: it holds job tokens, so only its owner may "
                       "read or write it (chmod 600 {})",
                       st.st_mode & 07777, path);
  return {};
}

std::vector<char> encode(const job_report& report) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto copy = report;
  if (auto err = sink(copy))
    throw std::logic_error("a job report could not be serialized");
  return buf;
}

// A report written before job_report had `lateness` (how late each rank comes): none
// measured.
struct report_before_lateness {
  job_report* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_before_lateness& r) {
  auto& x = *r.x;
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, x.spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks, x.max_memory);
}

// A spec written before job_spec had `compression`: the job sends float32.
struct spec_before_compression {
  job_spec* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spec_before_compression& s) {
  auto& x = *s.x;
  return f(caf::meta::type_name("rw::job_spec"), x.name, x.num_workers, x.chunk_bytes,
           x.optimizer, x.tensors, x.consistency, x.schedule);
}
struct report_before_compression {
  job_report* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_before_compression& r) {
  auto& x = *r.x;
  spec_before_compression spec{&x.spec};
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks, x.max_memory);
}

// A report written before job_report had `max_memory`: the job has the nodes' limit.
struct report_before_memory {
  job_report* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_before_memory& r) {
  auto& x = *r.x;
  spec_before_compression spec{&x.spec};
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks);
}

// A spec written before job_spec had `schedule` (hyper-parameter changes): as it was,
// with no changes.
struct spec_before_schedule {
  job_spec* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spec_before_schedule& s) {
  auto& x = *s.x;
  return f(caf::meta::type_name("rw::job_spec"), x.name, x.num_workers, x.chunk_bytes,
           x.optimizer, x.tensors, x.consistency);
}
struct report_before_schedule {
  job_report* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_before_schedule& r) {
  auto& x = *r.x;
  spec_before_schedule spec{&x.spec};
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, x.layout, spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks);
}

// A report written before job_layout had `replicas` (its binary form ends without it):
// read field by field as it was, the job without replicas (nor a schedule).
struct layout_before_replicas {
  job_layout* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layout_before_replicas& l) {
  auto& x = *l.x;
  return f(caf::meta::type_name("rw::job_layout"), x.nodes, x.addresses, x.racks,
           x.vnodes, x.ring_version, x.reduction, x.rank_racks, x.plan,
           x.join_timeout_ms);
}
struct report_before_replicas {
  job_report* x;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_before_replicas& r) {
  auto& x = *r.x;
  layout_before_replicas layout{&x.layout};
  spec_before_schedule spec{&x.spec};
  return f(caf::meta::type_name("rw::job_report"), x.id, x.name, x.state, x.reason,
           x.node, x.endpoints, layout, spec, x.created_unix_ms, x.started_unix_ms,
           x.ended_unix_ms, x.ranks);
}

template <class T>
bool decode_as(const void* data, int size, T&& out) {
  caf::binary_deserializer source{nullptr, static_cast<const char*>(data),
                                  static_cast<size_t>(size)};
  if (auto err = source(out))
    return false;
  return source.remaining() == 0;
}

bool decode(const void* data, int size, job_report& out) {
  if (decode_as(data, size, out))
    return true;
  out = job_report{};
  report_before_lateness before_lateness{&out};
  if (decode_as(data, size, before_lateness))
    return true;
  out = job_report{};
  report_before_compression before_compression{&out};
  if (decode_as(data, size, before_compression))
    return true;
  out = job_report{};
  report_before_memory before_memory{&out};
  if (decode_as(data, size, before_memory))
    return true;
  out = job_report{};
  report_before_schedule before_schedule{&out};
  if (decode_as(data, size, before_schedule))
    return true;
  out = job_report{};
  report_before_replicas old{&out};
  return decode_as(data, size, old);
}

} // namespace

cluster_store::cluster_store(std::string path, sqlite3* db)
  : path_(std::move(path)), db_(db) {}

cluster_store::~cluster_store() {
  sqlite3_close(db_);
}

std::string cluster_store::failure(const std::string& what) const {
  auto code = sqlite3_errcode(db_);
  std::string hint;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    hint = " (another process holds it: is another coordinator using this --state-db?)";
  else if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
    hint = " (the file is damaged or is not a RackWeave state database)";
  return fmt::format("state database {}: {}: {}{}", path_, what, sqlite3_errmsg(db_),
                     hint);
}

std::string cluster_store::exec(const std::string& sql) {
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK)
    return {};
  return failure(sql.substr(0, sql.find_first_of("(;=")));
}

std::unique_ptr<cluster_store> cluster_store::open(const std::string& path,
                                                   std::string& error) {
  if (auto why = check_or_create(path); !why.empty()) {
    error = fmt::format("state database {}: {}", path, why);
    return nullptr;
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    error = fmt::format("state database {}: cannot open it: {}", path,
                        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return nullptr;
  }
  std::unique_ptr<cluster_store> store{new cluster_store(path, db)};
  // Exclusive locking before WAL: one process holds the file, and WAL needs no
  // shared-memory index then. FULL: a commit is on disk when it returns.
  for (auto* pragma : {"PRAGMA busy_timeout = 0", "PRAGMA locking_mode = EXCLUSIVE",
                       "PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL"})
    if (auto why = store->exec(pragma); !why.empty()) {
      error = why;
      return nullptr;
    }
  {
    statement check;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &check.s, nullptr) != SQLITE_OK
        || sqlite3_step(check.s) != SQLITE_ROW) {
      error = store->failure("integrity check");
      return nullptr;
    }
    auto* first = reinterpret_cast<const char*>(sqlite3_column_text(check.s, 0));
    if (first == nullptr || std::string{first} != "ok") {
      error = fmt::format("state database {}: damaged (integrity check: {})", path,
                          first != nullptr ? first : "no answer");
      return nullptr;
    }
  }
  statement tables;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &tables.s, nullptr)
        != SQLITE_OK
      || sqlite3_step(tables.s) != SQLITE_ROW) {
    error = store->failure("reading its tables");
    return nullptr;
  }
  if (sqlite3_column_int(tables.s, 0) == 0) { // a new file: make the schema
    auto sql = fmt::format(
      "BEGIN IMMEDIATE; {} {} INSERT INTO schema_version VALUES ({}); "
      "COMMIT;",
      schema_sql, checkpoints_sql, cluster_store_schema);
    if (auto why = store->exec(sql); !why.empty()) {
      error = why;
      store->exec("ROLLBACK");
      return nullptr;
    }
    return store;
  }
  statement version;
  if (sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &version.s,
                         nullptr)
        != SQLITE_OK
      || sqlite3_step(version.s) != SQLITE_ROW) {
    error = fmt::format("state database {}: not a RackWeave state database (no schema "
                        "version: {})",
                        path, sqlite3_errmsg(db));
    return nullptr;
  }
  auto v = sqlite3_column_int(version.s, 0);
  if (v == 1) {                  // written before checkpoints were kept: add their table
    sqlite3_finalize(version.s); // its read ends before the write begins
    version.s = nullptr;
    auto sql = fmt::format("BEGIN IMMEDIATE; {} UPDATE schema_version SET version = {}; "
                           "COMMIT;",
                           checkpoints_sql, cluster_store_schema);
    if (auto why = store->exec(sql); !why.empty()) {
      store->exec("ROLLBACK");
      error = fmt::format("state database {}: cannot bring schema version 1 to {}: {}",
                          path, cluster_store_schema, why);
      return nullptr;
    }
    spdlog::info("state database {}: schema version 1 brought to {} (job checkpoints)",
                 path, cluster_store_schema);
    return store;
  }
  if (v != cluster_store_schema) {
    error = fmt::format("state database {}: schema version {}, but this rw-node reads "
                        "version {} only",
                        path, v, cluster_store_schema);
    return nullptr;
  }
  return store;
}

bool cluster_store::load(stored_registry& out, std::string& error) {
  out = {};
  {
    statement q;
    if (sqlite3_prepare_v2(db_, "SELECT value FROM counters WHERE name = 'next_job_id'",
                           -1, &q.s, nullptr)
        != SQLITE_OK) {
      error = failure("reading the job id counter");
      return false;
    }
    auto rc = sqlite3_step(q.s);
    if (rc == SQLITE_ROW)
      out.next_job_id = static_cast<uint32_t>(sqlite3_column_int64(q.s, 0));
    else if (rc != SQLITE_DONE) {
      error = failure("reading the job id counter");
      return false;
    }
  }
  statement q;
  if (sqlite3_prepare_v2(db_, "SELECT id, name, token, report FROM jobs ORDER BY id", -1,
                         &q.s, nullptr)
      != SQLITE_OK) {
    error = failure("reading the jobs");
    return false;
  }
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
    stored_job j;
    auto id = static_cast<uint32_t>(sqlite3_column_int64(q.s, 0));
    auto* name = reinterpret_cast<const char*>(sqlite3_column_text(q.s, 1));
    auto* token = reinterpret_cast<const char*>(sqlite3_column_text(q.s, 2));
    auto* blob = sqlite3_column_blob(q.s, 3);
    auto size = sqlite3_column_bytes(q.s, 3);
    if (name == nullptr || token == nullptr || blob == nullptr
        || !decode(blob, size, j.report) || j.report.id != id || j.report.name != name) {
      error = fmt::format(
        "state database {}: job {} ('{}') cannot be read back: the file "
        "is damaged or was written by another version",
        path_, id, name != nullptr ? name : "");
      return false;
    }
    j.token = token;
    out.jobs.push_back(std::move(j));
  }
  if (rc != SQLITE_DONE) {
    error = failure("reading the jobs");
    return false;
  }
  statement c;
  if (sqlite3_prepare_v2(
        db_, "SELECT id, restore, every, dir, last, last_clock FROM job_checkpoints", -1,
        &c.s, nullptr)
      != SQLITE_OK) {
    error = failure("reading the jobs' checkpoints");
    return false;
  }
  auto text = [&](int col) {
    auto* t = reinterpret_cast<const char*>(sqlite3_column_text(c.s, col));
    return t == nullptr ? std::string{} : std::string{t};
  };
  while ((rc = sqlite3_step(c.s)) == SQLITE_ROW) {
    auto id = static_cast<uint32_t>(sqlite3_column_int64(c.s, 0));
    for (auto& j : out.jobs)
      if (j.report.id == id) {
        j.restore = text(1);
        j.checkpoint_every = static_cast<uint64_t>(sqlite3_column_int64(c.s, 2));
        j.checkpoint_dir = text(3);
        j.last_checkpoint = text(4);
        j.last_checkpoint_clock = static_cast<uint64_t>(sqlite3_column_int64(c.s, 5));
      }
  }
  if (rc != SQLITE_DONE) {
    error = failure("reading the jobs' checkpoints");
    return false;
  }
  return true;
}

std::string cluster_store::write_counter(uint32_t next_job_id) {
  statement q;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO counters (name, value) VALUES ('next_job_id', ?1) "
                         "ON CONFLICT (name) DO UPDATE SET value = max(value, ?1)",
                         -1, &q.s, nullptr)
        != SQLITE_OK
      || sqlite3_bind_int64(q.s, 1, next_job_id) != SQLITE_OK
      || sqlite3_step(q.s) != SQLITE_DONE)
    return failure("writing the job id counter");
  return {};
}

std::string cluster_store::save_job(const stored_job& job, uint32_t next_job_id) {
  auto blob = encode(job.report);
  if (auto why = exec("BEGIN IMMEDIATE"); !why.empty())
    return why;
  auto fail = [this](std::string why) {
    exec("ROLLBACK");
    return why;
  };
  {
    statement q;
    auto& r = job.report;
    if (sqlite3_prepare_v2(db_,
                           "INSERT OR REPLACE INTO jobs (id, name, state, token, report) "
                           "VALUES (?1, ?2, ?3, ?4, ?5)",
                           -1, &q.s, nullptr)
          != SQLITE_OK
        || sqlite3_bind_int64(q.s, 1, r.id) != SQLITE_OK
        || sqlite3_bind_text(q.s, 2, r.name.data(), static_cast<int>(r.name.size()),
                             SQLITE_TRANSIENT)
             != SQLITE_OK
        || sqlite3_bind_text(q.s, 3, r.state.data(), static_cast<int>(r.state.size()),
                             SQLITE_TRANSIENT)
             != SQLITE_OK
        || sqlite3_bind_text(q.s, 4, job.token.data(), static_cast<int>(job.token.size()),
                             SQLITE_TRANSIENT)
             != SQLITE_OK
        || sqlite3_bind_blob(q.s, 5, blob.data(), static_cast<int>(blob.size()),
                             SQLITE_TRANSIENT)
             != SQLITE_OK
        || sqlite3_step(q.s) != SQLITE_DONE)
      return fail(failure(fmt::format("writing job {} ('{}')", r.id, r.name)));
  }
  if (!job.restore.empty() || job.checkpoint_every != 0 || !job.last_checkpoint.empty()) {
    statement q;
    auto bind_text = [&](int i, const std::string& s) {
      return sqlite3_bind_text(q.s, i, s.data(), static_cast<int>(s.size()),
                               SQLITE_TRANSIENT)
             == SQLITE_OK;
    };
    if (sqlite3_prepare_v2(
          db_,
          "INSERT OR REPLACE INTO job_checkpoints (id, restore, every, dir, "
          "last, last_clock) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
          -1, &q.s, nullptr)
          != SQLITE_OK
        || sqlite3_bind_int64(q.s, 1, job.report.id) != SQLITE_OK
        || !bind_text(2, job.restore)
        || sqlite3_bind_int64(q.s, 3, static_cast<sqlite3_int64>(job.checkpoint_every))
             != SQLITE_OK
        || !bind_text(4, job.checkpoint_dir) || !bind_text(5, job.last_checkpoint)
        || sqlite3_bind_int64(q.s, 6,
                              static_cast<sqlite3_int64>(job.last_checkpoint_clock))
             != SQLITE_OK
        || sqlite3_step(q.s) != SQLITE_DONE)
      return fail(failure(fmt::format("writing job {}'s checkpoints", job.report.id)));
  }
  if (auto why = write_counter(next_job_id); !why.empty())
    return fail(why);
  if (auto why = exec("COMMIT"); !why.empty())
    return fail(why);
  return {};
}

std::string cluster_store::save_next_job_id(uint32_t next_job_id) {
  return write_counter(next_job_id); // one statement: its own transaction
}

std::string cluster_store::remove_job(uint32_t id) {
  for (auto* sql :
       {"DELETE FROM job_checkpoints WHERE id = ?1", "DELETE FROM jobs WHERE id = ?1"}) {
    statement q;
    if (sqlite3_prepare_v2(db_, sql, -1, &q.s, nullptr) != SQLITE_OK
        || sqlite3_bind_int64(q.s, 1, id) != SQLITE_OK
        || sqlite3_step(q.s) != SQLITE_DONE)
      return failure(fmt::format("deleting job {}", id));
  }
  return {};
}

} // namespace rw::actors::detail
