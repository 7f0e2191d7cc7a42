#pragma once
// The cluster coordinator's job registry on disk: one SQLite database (WAL), so a
// coordinator killed and started again with the same --state-db has the jobs it had.
// The only file that includes sqlite3.h is cluster/store.cpp.
//
// What is kept, per job: its report (spec, layout and ring version, state and reason,
// times, the final per-rank counts of an ended job) and its token. The token is kept
// itself, not a hash: nodes check workers' proofs with it (HMAC keyed by the token), so
// a node that restarted while the coordinator was down needs it granted again. The file
// is therefore a secret like --cluster-secret-file: created 0600, and a file that
// others may read or write is refused. Besides the jobs: the next job id (ids are never
// reused) and the schema version, checked at open.
//
// Every write is one transaction, durable when the call returns (synchronous=FULL: a
// shell that was told a job exists must find it after a power cut too). The
// coordinator makes its calls on a thread of its own (store_writer.hpp): an fsync
// behind a disk's write backlog has taken seconds. The
// database is held with an exclusive lock: a second coordinator on the same file is
// refused at start.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster_messages.hpp"

struct sqlite3;

namespace rw::actors::detail {

/// One job as stored.
struct stored_job {
  job_report report;
  std::string token; // the token's secret, which the job's nodes verify workers with
  /// Checkpoints (table job_checkpoints, schema 2): the one the job started from,
  /// periodic ones, and the newest periodic one complete (where it restarts from when
  /// a node dies).
  std::string restore;
  uint64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  std::string last_checkpoint;
  uint64_t last_checkpoint_clock = 0;
};

/// Everything the store holds.
struct stored_registry {
  uint32_t next_job_id = 0;     // 0: nothing stored yet (a new file)
  std::vector<stored_job> jobs; // by id
};

/// The schema version this build writes; it reads version 1 too (and brings it to 2:
/// the job_checkpoints table, empty).
constexpr int cluster_store_schema = 2;

class cluster_store {
public:
  /// Opens the database at `path`, creating it (mode 0600) if there is none. Null with
  /// `error` set (naming the file) when it cannot: a directory that is missing, a file
  /// others may read or write, a file that is not a database or is damaged, a schema
  /// version this build does not know, a file another process holds.
  static std::unique_ptr<cluster_store> open(const std::string& path, std::string& error);

  ~cluster_store();
  cluster_store(const cluster_store&) = delete;
  cluster_store& operator=(const cluster_store&) = delete;

  /// Reads the whole registry. False with `error` set (naming the file and the job)
  /// when a row cannot be read back.
  bool load(stored_registry& out, std::string& error);

  /// Inserts or replaces a job, and raises the stored next job id to `next_job_id`,
  /// in one transaction. "" on success, else why not.
  std::string save_job(const stored_job& job, uint32_t next_job_id);
  /// Raises the stored next job id (ids taken by jobs that were never created).
  std::string save_next_job_id(uint32_t next_job_id);
  /// Deletes a job (deleted by an operator). "" on success.
  std::string remove_job(uint32_t id);

  const std::string& path() const noexcept { return path_; }

private:
  cluster_store(std::string path, sqlite3* db);
  std::string exec(const std::string& sql);
  std::string write_counter(uint32_t next_job_id);
  std::string failure(const std::string& what) const;

  std::string path_;
  sqlite3* db_;
};

} // namespace rw::actors::detail
