#pragma once
// What rw-node's /metrics and /readyz serve: a snapshot the node refreshes itself, once
// a second, on a thread of its own (asking the node's actors there, each answer bounded
// in time: actors/node/node_metrics.hpp). A scrape only copies a pointer to the latest text,
// so its cost does not grow with the number of scrapers and nobody who reaches the port
// can make the node's actors be asked more often.
//
// The exposition ends with the snapshot's own series:
//   rw_metrics_snapshot_age_seconds      gauge: since the refresh that read the figures began
//   rw_metrics_snapshot_refreshes_total  counter: refreshes since the node started
//   rw_metrics_refresh_seconds           gauge: how long the last refresh took

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "apps/tools/metrics_server.hpp"

namespace rw::tools {

class metrics_snapshot {
public:
  using clock = std::chrono::steady_clock;

  struct sources {
    std::function<std::string()> metrics;   // the exposition text (may throw)
    std::function<std::string()> not_ready; // "" when ready, else why not (may throw)
  };

  /// One refresh at once (on the calling thread), then one every `period` (start to
  /// start; right after the last one if that took longer) until stopped.
  explicit metrics_snapshot(sources s,
                            std::chrono::milliseconds period = std::chrono::seconds(1));
  ~metrics_snapshot();

  metrics_snapshot(const metrics_snapshot&) = delete;
  metrics_snapshot& operator=(const metrics_snapshot&) = delete;

  struct reading {
    std::shared_ptr<const std::string> text; // the last good exposition
    std::string error;          // why the last refresh failed; "" if it did not
    std::string not_ready;      // as the last refresh found it
    clock::time_point started;  // when the last refresh began
    double refresh_seconds = 0; // how long it took
    uint64_t refreshes = 0;     // since the start
  };

  /// The latest snapshot. Quick: a lock and a pointer copy.
  reading latest() const;

  /// What /metrics serves: the latest text and the snapshot's own series. Throws
  /// std::runtime_error saying why when the last refresh failed.
  metrics_server::exposition exposition() const;

  /// What /readyz says: "" when the last refresh found the node ready, else why not.
  std::string not_ready() const;

  /// The snapshot's own series (age at `now`, refreshes, refresh time), in the text
  /// format, to follow `r.text`.
  static std::string own_series(const reading& r, clock::time_point now);

  /// Stops refreshing; waits for a refresh in progress. Idempotent.
  void stop();

private:
  void refresh();
  void run(std::chrono::milliseconds period);

  sources sources_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  reading latest_;
  std::thread thread_;
};

} // namespace rw::tools
