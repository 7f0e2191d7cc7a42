#include "runtime/trace.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "rackweave/errc.hpp"
#include "runtime/thread_cpu.hpp"

namespace rw::runtime::trace {

namespace {

struct record {
  const char* name;
  const char* cat;
  uint64_t begin_ns;
  uint64_t dur_ns;
  about a;
  char phase;
};

// One thread's records; the writer swaps them out under `mtx`.
struct thread_buffer {
  std::mutex mtx;
  std::vector<record> records;
  uint64_t dropped = 0;
  long tid = 0;
  std::string name;   // the thread's name when it first recorded
  bool named = false; // the writer wrote its thread_name
};

} // namespace

struct session::state {
  std::string path;
  std::FILE* file = nullptr;
  uint64_t generation = 0; // threads register again in each new session
  int users = 0;           // sessions sharing this file

  std::mutex threads_mtx;
  std::vector<std::shared_ptr<thread_buffer>> threads;

  std::mutex wake_mtx;
  std::condition_variable wake;
  bool stopping = false;
  std::thread writer;

  uint64_t dropped = 0;   // by threads over their bound (the writer's, then the closer's)
  uint64_t written = 0;   // records formatted into the file
  uint64_t format_ns = 0; // CPU time the writer and the closer spent taking and writing
  fmt::memory_buffer out; // the lines being formatted (the writer's, then the closer's)
  std::vector<record> taken; // the records being formatted, likewise
  bool first_event = true;

  // What goes before the next event: the array's events are comma-separated.
  const char* separator() {
    auto* sep = first_event ? "\n" : ",\n";
    first_event = false;
    return sep;
  }
  void write_event(const std::string& line) {
    std::fputs(separator(), file);
    std::fputs(line.c_str(), file);
  }
  void take_all();
  void run_writer();
};

namespace {

std::mutex sessions_mtx;
std::shared_ptr<session::state> current;     // under sessions_mtx
std::atomic<uint64_t> current_generation{0}; // current's generation; 0: none
std::atomic<uint64_t> generation_counter{0};

thread_local std::shared_ptr<thread_buffer> my_buffer;
thread_local uint64_t my_generation = 0;

long this_tid() {
  return static_cast<long>(::syscall(SYS_gettid));
}

// The thread's name now (it may have named itself after its first record), or, if it
// has ended, the name it had when it first recorded.
std::string thread_name_of(const thread_buffer& t) {
  std::ifstream in{fmt::format("/proc/self/task/{}/comm", t.tid)};
  std::string name;
  std::getline(in, name);
  if (!name.empty())
    return name;
  return t.name.empty() ? fmt::format("thread {}", t.tid) : t.name;
}

// JSON string contents: names are ours, but a process name comes from the caller.
std::string escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Appending to an event's line without format strings: the writer formats every event
// of the run (bench/trace_cost.cpp measures it).
void put(fmt::memory_buffer& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

void put(fmt::memory_buffer& out, uint64_t v) {
  fmt::format_int digits{v};
  out.append(digits.data(), digits.data() + digits.size());
}

// Nanoseconds as microseconds with three decimals ("12.345").
void put_micros(fmt::memory_buffer& out, uint64_t ns) {
  put(out, ns / 1000);
  auto rest = static_cast<unsigned>(ns % 1000);
  char frac[4] = {'.', char('0' + rest / 100), char('0' + rest / 10 % 10),
                  char('0' + rest % 10)};
  out.append(frac, frac + 4);
}

// One event's line, appended to `out` (no allocation once `out` has grown).
void format_event(fmt::memory_buffer& out, const record& r, long pid, long tid) {
  put(out, R"({"name":")");
  put(out, r.name);
  put(out, R"(","cat":")");
  put(out, r.cat);
  put(out, R"(","ph":")");
  out.push_back(r.phase);
  put(out, R"(","ts":)");
  put_micros(out, r.begin_ns);
  if (r.phase == 'X') {
    put(out, R"(,"dur":)");
    put_micros(out, r.dur_ns);
  } else {
    put(out, R"(,"s":"t")");
  }
  put(out, R"(,"pid":)");
  put(out, static_cast<uint64_t>(pid));
  put(out, R"(,"tid":)");
  put(out, static_cast<uint64_t>(tid));
  bool any = false;
  auto arg = [&](std::string_view key, uint64_t v) {
    if (v == about::none)
      return;
    put(out, any ? R"(,")" : R"(,"args":{")");
    put(out, key);
    put(out, R"(":)");
    put(out, v);
    any = true;
  };
  arg("job", r.a.job);
  arg("rank", r.a.rank);
  arg("tensor", r.a.tensor);
  arg("chunk", r.a.chunk);
  arg("clock", r.a.clock);
  put(out, any ? "}}" : "}");
}

} // namespace

namespace detail {

std::atomic<bool> recording{false};

void record(const char* name, const char* cat, char phase, uint64_t begin_ns,
            uint64_t dur_ns, const about& a) noexcept {
  // The session is never touched without sessions_mtx: it may end (and be freed) at
  // any moment. A record that races with its end lands in a buffer nobody reads.
  auto gen = current_generation.load(std::memory_order_acquire);
  if (gen == 0)
    return;
  try {
    if (!my_buffer || my_generation != gen) {
      std::lock_guard<std::mutex> guard{sessions_mtx};
      if (!current || current->generation != gen)
        return; // ended meanwhile
      my_buffer = std::make_shared<thread_buffer>();
      my_buffer->tid = this_tid();
      char name[32] = {};
      if (pthread_getname_np(pthread_self(), name, sizeof name) == 0)
        my_buffer->name = name;
      my_generation = gen;
      std::lock_guard<std::mutex> threads{current->threads_mtx};
      current->threads.push_back(my_buffer);
    }
    std::lock_guard<std::mutex> guard{my_buffer->mtx};
    if (my_buffer->records.size() >= max_records_per_thread) {
      ++my_buffer->dropped;
      return;
    }
    my_buffer->records.push_back({name, cat, begin_ns, dur_ns, a, phase});
  } catch (...) { // out of memory: the event is lost, the caller goes on
  }
}

} // namespace detail

uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull
         + static_cast<uint64_t>(ts.tv_nsec);
}

void session::state::take_all() {
  auto cpu_at_start = runtime::this_thread_cpu_ns();
  std::vector<std::shared_ptr<thread_buffer>> list;
  {
    std::lock_guard<std::mutex> guard{threads_mtx};
    list = threads;
  }
  const auto pid = static_cast<long>(::getpid());
  for (auto& t : list) {
    uint64_t lost = 0;
    {
      std::lock_guard<std::mutex> guard{t->mtx};
      taken.swap(t->records);
      lost = t->dropped;
      t->dropped = 0;
    }
    if (!t->named) {
      t->named = true;
      write_event(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},)"
                              R"("args":{{"name":"{}"}}}})",
                              pid, t->tid, escaped(thread_name_of(*t))));
    }
    dropped += lost;
    // Written in pieces of about 256 KiB from one buffer kept across takes: no buffer
    // grows with the records, and none is allocated again.
    for (auto& r : taken) {
      out.append(std::string_view{separator()});
      format_event(out, r, pid, t->tid);
      if (out.size() >= (256u << 10)) {
        std::fwrite(out.data(), 1, out.size(), file);
        out.clear();
      }
    }
    std::fwrite(out.data(), 1, out.size(), file);
    out.clear();
    written += taken.size();
    taken.clear();
  }
  std::fflush(file);
  format_ns += runtime::this_thread_cpu_ns() - cpu_at_start;
}

void session::state::run_writer() {
  // Formatting yields to the data path when cores are short (a niceness, for this thread
  // alone): its records wait in their buffers meanwhile.
  pthread_setname_np(pthread_self(), "rw-trace");
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()), 10);
  std::unique_lock<std::mutex> lock{wake_mtx};
  while (!stopping) {
    wake.wait_for(lock, std::chrono::milliseconds(50));
    lock.unlock();
    take_all();
    lock.lock();
  }
}

session::session(const std::string& path, const std::string& process) {
  std::lock_guard<std::mutex> guard{sessions_mtx};
  if (current) {
    if (current->path != path)
      throw rw::error(
        errc::invalid_spec,
        fmt::format("trace: this process writes its trace to {} already; one "
                    "trace file per process (asked for {})",
                    current->path, path));
    ++current->users;
    state_ = current;
    return;
  }
  auto s = std::make_shared<state>();
  s->path = path;
  s->file = std::fopen(path.c_str(), "w");
  if (s->file == nullptr)
    throw rw::error(errc::io_error, fmt::format("trace: cannot write {}: {}", path,
                                                std::strerror(errno)));
  std::fputs("[", s->file);
  s->write_event(
    fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"{}"}}}})",
                static_cast<long>(::getpid()), escaped(process)));
  s->generation = generation_counter.fetch_add(1) + 1;
  s->users = 1;
  s->writer = std::thread([raw = s.get()] { raw->run_writer(); });
  current = s;
  current_generation.store(s->generation, std::memory_order_release);
  detail::recording.store(true, std::memory_order_relaxed);
  state_ = std::move(s);
}

session::~session() {
  std::shared_ptr<state> s;
  {
    std::lock_guard<std::mutex> guard{sessions_mtx};
    if (--state_->users > 0)
      return;
    detail::recording.store(false, std::memory_order_relaxed);
    current_generation.store(0, std::memory_order_release);
    current.reset();
    s = std::move(state_);
  }
  {
    std::lock_guard<std::mutex> guard{s->wake_mtx};
    s->stopping = true;
  }
  s->wake.notify_all();
  s->writer.join();
  s->take_all(); // what was recorded while the writer stopped
  if (auto lost = s->dropped; lost > 0)
    s->write_event(
      fmt::format(R"({{"name":"dropped records","ph":"i","s":"g","ts":{}.000,)"
                  R"("pid":{},"tid":0,"args":{{"dropped":{}}}}})",
                  now_ns() / 1000, static_cast<long>(::getpid()), lost));
  // What tracing cost this process on the writer's side (for bench/trace.sh): the
  // records written and the CPU time spent formatting them.
  s->write_event(fmt::format(
    R"({{"name":"trace cost","ph":"i","s":"g","ts":{}.000,"pid":{},"tid":0,)"
    R"("args":{{"records":{},"format_cpu_us":{}}}}})",
    now_ns() / 1000, static_cast<long>(::getpid()), s->written, s->format_ns / 1000));
  std::fputs("\n]\n", s->file);
  std::fclose(s->file);
}

} // namespace rw::runtime::trace
