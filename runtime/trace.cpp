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

  uint64_t dropped = 0; // by threads over their bound (the writer's, then the closer's)
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

// One event's line, appended to `out` (no allocation once `out` has grown).
void format_event(fmt::memory_buffer& out, const record& r, long pid, long tid) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, R"({{"name":"{}","cat":"{}","ph":"{}","ts":{}.{:03},)", r.name,
                 r.cat, r.phase, r.begin_ns / 1000, r.begin_ns % 1000);
  if (r.phase == 'X')
    fmt::format_to(it, R"("dur":{}.{:03},)", r.dur_ns / 1000, r.dur_ns % 1000);
  else
    fmt::format_to(it, R"("s":"t",)");
  fmt::format_to(it, R"("pid":{},"tid":{})", pid, tid);
  bool any = false;
  auto arg = [&](const char* key, uint64_t v) {
    if (v == about::none)
      return;
    fmt::format_to(it, R"({}"{}":{})", any ? "," : R"(,"args":{)", key, v);
    any = true;
  };
  arg("job", r.a.job);
  arg("rank", r.a.rank);
  arg("tensor", r.a.tensor);
  arg("chunk", r.a.chunk);
  arg("clock", r.a.clock);
  fmt::format_to(it, "{}}}", any ? "}" : "");
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
  std::vector<std::shared_ptr<thread_buffer>> list;
  {
    std::lock_guard<std::mutex> guard{threads_mtx};
    list = threads;
  }
  const auto pid = static_cast<long>(::getpid());
  std::vector<record> taken;
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
    fmt::memory_buffer out;
    for (auto& r : taken) {
      out.append(std::string_view{separator()});
      format_event(out, r, pid, t->tid);
    }
    std::fwrite(out.data(), 1, out.size(), file);
    taken.clear();
  }
  std::fflush(file);
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
  std::fputs("\n]\n", s->file);
  std::fclose(s->file);
}

} // namespace rw::runtime::trace
