// rw-trace-cost: what one traced event costs the thread that records it, on this
// machine: T threads each record N complete events (runtime::trace::scope, with the
// args a shard's answer carries) while a session writes them to a file, and the
// recording threads' CPU time per event is reported, with the writer's (from the
// file's "trace cost" event). bench/trace.sh multiplies it by the events of a traced
// run for tracing's own CPU time, beside its traced / untraced comparison.
//
//   rw-trace-cost [--events 200000] [--threads 1] [--json]

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/thread_cpu.hpp"
#include "runtime/trace.hpp"

namespace {} // namespace

int main(int argc, char** argv) {
  CLI::App app{"rw-trace-cost: the CPU time one traced event costs its thread"};
  uint64_t events = 200000;
  uint32_t threads = 1;
  bool json = false;
  app.add_option("--events", events, "events each thread records (at most 200000)")
    ->check(CLI::Range(uint64_t{1000}, uint64_t{200000}))
    ->capture_default_str();
  app.add_option("--threads", threads, "recording threads")
    ->check(CLI::Range(1u, 64u))
    ->capture_default_str();
  app.add_flag("--json", json, "one JSON line");
  CLI11_PARSE(app, argc, argv);

  namespace fs = std::filesystem;
  auto path = (fs::temp_directory_path()
               / fmt::format("rw-trace-cost-{}.json", static_cast<long>(::getpid())))
                .string();
  std::vector<uint64_t> cpu(threads, 0);
  {
    rw::runtime::trace::session session{path, "rw-trace-cost"};
    std::vector<std::thread> running;
    for (uint32_t k = 0; k < threads; ++k)
      running.emplace_back([&, k] {
        auto start = rw::runtime::this_thread_cpu_ns();
        for (uint64_t i = 0; i < events; ++i) {
          rw::runtime::trace::scope traced{"answer", "shard", {1, k, 2, i, 3}};
        }
        cpu[k] = rw::runtime::this_thread_cpu_ns() - start;
      });
    for (auto& t : running)
      t.join();
  }
  // The writer's side, as the file says.
  uint64_t written = 0, format_us = 0;
  {
    auto all = nlohmann::json::parse(std::ifstream{path});
    for (auto& e : all)
      if (e.value("name", "") == "trace cost") {
        written = e["args"]["records"].get<uint64_t>();
        format_us = e["args"]["format_cpu_us"].get<uint64_t>();
      }
  }
  std::error_code ec;
  fs::remove(path, ec);
  uint64_t total_cpu = 0;
  for (auto c : cpu)
    total_cpu += c;
  double record_ns = double(total_cpu) / double(events * threads);
  double format_ns = written ? double(format_us) * 1000.0 / double(written) : 0.0;
  if (written != events * threads) {
    std::cerr << fmt::format("rw-trace-cost: the file holds {} of {} events\n", written,
                             events * threads);
    return 1;
  }
  if (json)
    std::cout << nlohmann::json{{"threads", threads},
                                {"events", events * threads},
                                {"record_ns", std::round(record_ns * 10) / 10},
                                {"format_ns", std::round(format_ns * 10) / 10}}
                   .dump()
              << "\n";
  else
    std::cout << fmt::format("{} thread(s), {} events: recording {:.1f} ns of the "
                             "recording thread's CPU per event, writing {:.1f} ns of the "
                             "writer's\n",
                             threads, events * threads, record_ns, format_ns);
  return 0;
}
