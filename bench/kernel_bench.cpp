// rw-kernel-bench: the shard's fused sum + optimizer kernel against a plain streaming
// kernel with the same memory access pattern (same arrays read and written, adds only),
// in the same binary and run, for every instruction set the CPU has and every
// optimizer. The ratio stream_time / step_time says how close the step runs to the
// memory system's speed for that pattern: 1.0 means the arithmetic is free.
//
//   rw-kernel-bench [--bytes 64MiB] [--chunk-bytes 32KiB] [--reps 15] [--json]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/tools/units.hpp"
#include "runtime/aligned.hpp"
#include "runtime/kernels.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct arrays {
  size_t n;
  rw::runtime::aligned_floats p, acc, last, m, v;
  explicit arrays(size_t n)
    : n(n), p(rw::runtime::make_aligned_floats(n)),
      acc(rw::runtime::make_aligned_floats(n)), last(rw::runtime::make_aligned_floats(n)),
      m(rw::runtime::make_aligned_floats(n)), v(rw::runtime::make_aligned_floats(n)) {
    for (size_t i = 0; i < n; ++i) {
      acc[i] = 1e-3f * static_cast<float>(i % 97);
      last[i] = 2e-3f * static_cast<float>(i % 89);
      p[i] = 0.5f;
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes moved per element by the pattern: reads and writes of each stream.
double bytes_per_element(rw::optimizer_kind k) {
  switch (k) {
    case rw::optimizer_kind::sum: return 12; // acc, last read; p written
    case rw::optimizer_kind::sgd: return 16; // + p read
    case rw::optimizer_kind::momentum:
    case rw::optimizer_kind::nesterov: return 24; // + m read and written
    case rw::optimizer_kind::adam: return 32;     // + v read and written
    case rw::optimizer_kind::lamb:                // two phases over the tensor
    case rw::optimizer_kind::lars: return 0; // (runtime/layerwise): not measured here
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string bytes_text = "64MiB", chunk_text = "32KiB";
  int reps = 15;
  bool json = false;
  CLI::App app{"rw-kernel-bench: fused sum+update kernel vs a plain streaming kernel of "
               "the same access pattern"};
  app.add_option("--bytes", bytes_text, "tensor size (per array)")->capture_default_str();
  app
    .add_option("--chunk-bytes", chunk_text, "processed chunk by chunk, as a shard does")
    ->capture_default_str();
  app.add_option("--reps", reps, "repetitions of each kernel (median reported)")
    ->capture_default_str();
  app.add_flag("--json", json, "one JSON object per (isa, optimizer)");
  CLI11_PARSE(app, argc, argv);
  auto n = rw::tools::parse_bytes(bytes_text) / sizeof(float);
  auto chunk = rw::tools::parse_bytes(chunk_text) / sizeof(float);
  if (n == 0 || chunk == 0 || reps < 1) {
    std::cerr << "rw-kernel-bench: sizes and --reps must be positive\n";
    return 2;
  }
  arrays a{n};
  if (!json)
    fmt::print("{:<8} {:<9} {:>10} {:>12} {:>8}\n", "isa", "optimizer", "step GB/s",
               "stream GB/s", "ratio");
  for (auto& isa : rw::runtime::supported_isas()) {
    auto& k = rw::runtime::kernels_for(isa);
    for (auto kind :
         {rw::optimizer_kind::sum, rw::optimizer_kind::sgd, rw::optimizer_kind::momentum,
          rw::optimizer_kind::nesterov, rw::optimizer_kind::adam}) {
      rw::optimizer_spec s;
      s.kind = kind;
      s.learning_rate = 1e-6f;
      int arrays_used = rw::runtime::state_arrays(kind);
      float* m = arrays_used >= 1 ? a.m.get() : nullptr;
      float* v = arrays_used >= 2 ? a.v.get() : nullptr;
      std::vector<double> step_s, stream_s;
      for (int r = 0; r < reps + 1; ++r) { // interleaved, first round is warm-up
        auto t0 = clock_type::now();
        for (size_t off = 0; off < n; off += chunk) {
          auto len = std::min(chunk, n - off);
          k.step(s, 0.25f, static_cast<uint64_t>(r) + 1, a.p.get() + off,
                 a.acc.get() + off, a.last.get() + off,
                 {m ? m + off : nullptr, v ? v + off : nullptr}, len);
        }
        auto t1 = clock_type::now();
        for (size_t off = 0; off < n; off += chunk) {
          auto len = std::min(chunk, n - off);
          k.stream(a.p.get() + off, a.acc.get() + off, a.last.get() + off,
                   m ? m + off : nullptr, v ? v + off : nullptr,
                   kind != rw::optimizer_kind::sum, len);
        }
        auto t2 = clock_type::now();
        if (r == 0)
          continue;
        step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        stream_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      double bytes = bytes_per_element(kind) * static_cast<double>(n);
      double step_gbs = bytes / median(step_s) / 1e9;
      double stream_gbs = bytes / median(stream_s) / 1e9;
      double ratio = median(stream_s) / median(step_s);
      if (json)
        fmt::print(
          "{}\n",
          nlohmann::ordered_json{{"isa", isa},
                                 {"optimizer", rw::to_string(kind)},
                                 {"bytes", n * sizeof(float)},
                                 {"step_gbs", std::round(step_gbs * 100) / 100},
                                 {"stream_gbs", std::round(stream_gbs * 100) / 100},
                                 {"ratio", std::round(ratio * 1000) / 1000}}
            .dump());
      else
        fmt::print("{:<8} {:<9} {:>10.2f} {:>12.2f} {:>8.3f}\n", isa, rw::to_string(kind),
                   step_gbs, stream_gbs, ratio);
    }
  }
  std::string command = "rw-kernel-bench";
  for (int i = 1; i < argc; ++i)
    command += std::string(" ") + argv[i];
  if (!json)
    fmt::print("command: {}\n", command);
  return 0;
}
