// The state database's writer: applies the coordinator's writes in order, off its
// thread (see store_writer.hpp).

#include "actors/cluster/store_writer.hpp"

#include <chrono>

#include <spdlog/spdlog.h>

namespace rw::actors::detail {

namespace {

// A commit this slow is logged: a warning an operator can act on.
constexpr auto slow_commit = std::chrono::milliseconds(250);

std::string write_named(const store_write& w) {
  switch (w.what) {
    case store_write::kind::save_job:
      return fmt::format("recording job '{}' (id {}, {})", w.job.report.name,
                         w.job.report.id, w.job.report.state);
    case store_write::kind::save_next_job_id:
      return fmt::format("recording the next job id {}", w.next_job_id);
    case store_write::kind::remove_job: return fmt::format("deleting job {}", w.job_id);
  }
  return "a write";
}

std::string apply(cluster_store& store, const store_write& w) {
  switch (w.what) {
    case store_write::kind::save_job: return store.save_job(w.job, w.next_job_id);
    case store_write::kind::save_next_job_id:
      return store.save_next_job_id(w.next_job_id);
    case store_write::kind::remove_job: return store.remove_job(w.job_id);
  }
  return "unknown write";
}

store_writer_actor::behavior_type writer_behavior(store_writer_actor::pointer self,
                                                  std::shared_ptr<cluster_store> store,
                                                  caf::actor_addr coordinator) {
  self->monitor(coordinator);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
    [self, store](store_write& w) -> std::string {
      auto started = std::chrono::steady_clock::now();
      auto why = apply(*store, w);
      auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
      if (took >= slow_commit)
        spdlog::warn("state database {}: {} took {} ms (a synchronous commit; the "
                     "coordinator went on, answers that wait for it were held): a disk "
                     "with less write backlog under --state-db shortens it",
                     store->path(), write_named(w), took.count());
      if (!why.empty())
        spdlog::error("state database {}: {} failed: {}", store->path(), write_named(w),
                      why);
      return why;
    },
  };
}

} // namespace

store_writer_actor spawn_store_writer(caf::actor_system& sys,
                                      std::shared_ptr<cluster_store> store,
                                      const caf::actor_addr& coordinator) {
  return sys.spawn<caf::detached>(writer_behavior, std::move(store), coordinator);
}

} // namespace rw::actors::detail
