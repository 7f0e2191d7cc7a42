#include "apps/tools/metrics_snapshot.hpp"

#include <exception>
#include <stdexcept>

#include "runtime/prometheus.hpp"

namespace rw::tools {

metrics_snapshot::metrics_snapshot(sources s, std::chrono::milliseconds period)
  : sources_(std::move(s)) {
  refresh();
  thread_ = std::thread([this, period] { run(period); });
}

metrics_snapshot::~metrics_snapshot() {
  stop();
}

void metrics_snapshot::stop() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

metrics_snapshot::reading metrics_snapshot::latest() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return latest_;
}

metrics_server::exposition metrics_snapshot::exposition() const {
  auto r = latest();
  if (!r.error.empty() || !r.text)
    throw std::runtime_error(r.error);
  return {std::move(r.text), own_series(r, clock::now())};
}

std::string metrics_snapshot::not_ready() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return latest_.not_ready;
}

void metrics_snapshot::refresh() {
  auto started = clock::now();
  std::shared_ptr<const std::string> text;
  std::string error, why;
  try {
    text = std::make_shared<const std::string>(sources_.metrics());
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    why = sources_.not_ready();
  } catch (const std::exception&) {
    why = "the readiness check failed";
  }
  auto took = std::chrono::duration<double>(clock::now() - started).count();
  std::lock_guard<std::mutex> guard{mutex_};
  if (text)
    latest_.text = std::move(text);
  latest_.error = std::move(error);
  latest_.not_ready = std::move(why);
  latest_.started = started;
  latest_.refresh_seconds = took;
  ++latest_.refreshes;
}

void metrics_snapshot::run(std::chrono::milliseconds period) {
  auto next = latest().started + period;
  std::unique_lock<std::mutex> lock{mutex_};
  while (!wake_.wait_until(lock, next, [this] { return done_; })) {
    lock.unlock();
    auto started = clock::now();
    refresh();
    next = std::max(started + period, clock::now());
    lock.lock();
  }
}

std::string metrics_snapshot::own_series(const reading& r, clock::time_point now) {
  namespace prom = runtime::prometheus;
  prom::writer w;
  w.family("rw_metrics_snapshot_age_seconds", prom::kind::gauge,
           "seconds since the refresh that read these figures from the node began (one "
           "a second)");
  w.sample({}, std::chrono::duration<double>(now - r.started).count());
  w.family("rw_metrics_snapshot_refreshes_total", prom::kind::counter,
           "snapshots of the node's figures taken since it started");
  w.sample({}, static_cast<double>(r.refreshes));
  w.family("rw_metrics_refresh_seconds", prom::kind::gauge,
           "how long the last snapshot took to read from the node's actors");
  w.sample({}, r.refresh_seconds);
  return w.text();
}

} // namespace rw::tools
