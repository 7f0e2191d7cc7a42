#pragma once
// A step timeline: Chrome trace-event JSON (opens in Perfetto, ui.perfetto.dev, and in
// chrome://tracing), written while a `trace::session` lives. Off by default; `rw-node
// --trace FILE` and the worker's `trace` option open one.
//
// Recording is a relaxed load when no session is open. When one is, each thread appends
// fixed-size records (a name and category of static storage, a time, a duration, five
// numbers) to its own buffer under its own, uncontended lock; a writer thread takes the
// buffers every 50 ms and formats them into the file (at niceness 10: it yields to the
// data path when cores are short), so the threads that record never format or write. A thread records at most `max_records_per_thread` between two
// takes; more are dropped and counted (a "dropped records" event at the file's end says
// how many).
//
// The file ("JSON array format"): '[', one event object per line, ']' when the session
// ends. A process that dies leaves a file without the ']', which both viewers open. Its
// last event, "trace cost", gives the records written and the CPU time the writer spent
// formatting them (format_cpu_us): tracing's own cost, with what recording costs a
// thread per event (bench/trace_cost.cpp measures that).
//  - "ph":"X" complete events: ts and dur in microseconds of CLOCK_MONOTONIC, so the
//    files of several processes on one host line up (load them together in Perfetto);
//  - "ph":"i" instant events, thread-scoped;
//  - "ph":"M" metadata: the process's name (process_name) and each thread's
//    (thread_name, as runtime::name_this_thread set it: rw-poll-0, rw-shard-3, ...).
// Every event carries pid and tid, and "args" with job, rank, tensor, chunk and clock
// where the recorder gave them (args it did not give are left out).
//
// One session per process at a time: opening a second one for the same path shares it
// (a node and a worker in one test process); for another path it throws.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace rw::runtime::trace {

/// What an event is about; a field left at `none` is not written.
struct about {
  static constexpr uint64_t none = UINT64_MAX;
  uint64_t job = none;
  uint64_t rank = none;
  uint64_t tensor = none;
  uint64_t chunk = none;
  uint64_t clock = none;
};

/// Records a thread may hold between two takes of the writer (then dropped, counted).
constexpr size_t max_records_per_thread = 1u << 18;

namespace detail {
extern std::atomic<bool> recording;
void record(const char* name, const char* cat, char phase, uint64_t begin_ns,
            uint64_t dur_ns, const about& a) noexcept;
} // namespace detail

/// Whether a session is open (cheap: one relaxed load).
inline bool on() noexcept {
  return detail::recording.load(std::memory_order_relaxed);
}

/// CLOCK_MONOTONIC in nanoseconds: the time base of every event.
uint64_t now_ns() noexcept;

/// A complete event from `begin_ns` (now_ns()) to now. `name` and `cat` must be string
/// literals (or live as long as the process): only their addresses are kept.
inline void complete(const char* name, const char* cat, uint64_t begin_ns,
                     const about& a = {}) noexcept {
  if (on())
    detail::record(name, cat, 'X', begin_ns, now_ns() - begin_ns, a);
}

/// A complete event from `begin_ns` lasting `dur_ns`, both on now_ns()'s clock (a
/// std::chrono::steady_clock time converts with ns_of).
inline void span(const char* name, const char* cat, uint64_t begin_ns, uint64_t dur_ns,
                 const about& a = {}) noexcept {
  if (on())
    detail::record(name, cat, 'X', begin_ns, dur_ns, a);
}

/// A steady_clock time on now_ns()'s clock (libstdc++'s steady_clock is
/// CLOCK_MONOTONIC, which now_ns() reads).
inline uint64_t ns_of(std::chrono::steady_clock::time_point t) noexcept {
  return static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

/// An instant event, now.
inline void instant(const char* name, const char* cat, const about& a = {}) noexcept {
  if (on())
    detail::record(name, cat, 'i', now_ns(), 0, a);
}

/// Records [construction, destruction) as a complete event, if a session was open when
/// it was made. `a` may be filled in meanwhile.
class scope {
public:
  scope(const char* name, const char* cat, const about& a = {}) noexcept
    : name_(name), cat_(cat), a_(a), begin_(on() ? now_ns() : 0) {}
  ~scope() {
    if (begin_ != 0)
      complete(name_, cat_, begin_, a_);
  }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  about& args() noexcept { return a_; }

private:
  const char* name_;
  const char* cat_;
  about a_;
  uint64_t begin_;
};

/// Writes the process's events to a file while it lives.
class session {
public:
  /// Opens (truncates) `path` and starts recording; `process` names the process in the
  /// viewer ("rw-node rack-agg", "worker rank 3"). Throws rw::error(errc::io_error) if
  /// the file cannot be written, rw::error(errc::invalid_spec) if another session of
  /// this process writes to another path.
  session(const std::string& path, const std::string& process);
  /// Stops recording (the last session sharing the file), writes what is buffered and
  /// the closing ']'.
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  struct state;

private:
  std::shared_ptr<state> state_;
};

} // namespace rw::runtime::trace
