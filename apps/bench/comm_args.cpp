#include "apps/bench/comm_args.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "apps/tools/units.hpp"

namespace rw::bench {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    auto comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                              : comma - start);
    if (item.empty())
      throw std::invalid_argument(
        fmt::format("'{}' has an empty entry: give A,B,...", text));
    out.push_back(item);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

// "1:50ms", "2:0.2s", "0:100us" (a bare number is milliseconds).
straggler_spec parse_straggler(const std::string& text, uint32_t workers) {
  straggler_spec out;
  if (text.empty())
    return out;
  auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument("--straggler takes RANK:DELAY, e.g. 1:50ms");
  auto rank = std::stoul(text.substr(0, colon));
  if (rank >= workers)
    throw std::invalid_argument(
      fmt::format("--straggler rank {} is not one of the {} workers", rank, workers));
  auto delay = text.substr(colon + 1);
  size_t used = 0;
  double value = std::stod(delay, &used);
  auto unit = delay.substr(used);
  double us = unit == "us"                     ? value
              : unit == "s"                    ? value * 1e6
              : (unit.empty() || unit == "ms") ? value * 1e3
                                               : -1;
  if (us < 0 || value < 0)
    throw std::invalid_argument("--straggler delay '" + delay
                                + "' is not a duration (us, ms, s)");
  out.rank = static_cast<int>(rank);
  out.delay = std::chrono::microseconds(static_cast<int64_t>(us));
  return out;
}

bool compress_updates(const comm_args& a) {
  if (a.updates_on || a.updates_off)
    return a.updates_on;
  auto kind = parse_compression(a.compression).kind;
  return kind == compression_spec::bf16 || kind == compression_spec::fp16;
}

// The benchmark's job, as the coordinator creates it (no tensors: workers declare them).
job_spec bench_spec(const comm_args& a) {
  job_spec spec;
  spec.name = a.job;
  spec.num_workers = a.workers;
  spec.chunk_bytes = static_cast<uint32_t>(rw::tools::parse_bytes(a.chunk_text));
  spec.optimizer.kind = optimizer_kind::sum;
  spec.consistency = parse_consistency(a.consistency);
  spec.compression = parse_compression(a.compression);
  spec.compression.updates = compress_updates(a);
  return spec;
}

std::vector<tensor_spec> bench_tensors(uint64_t elems, uint32_t layers) {
  if (layers == 0)
    return {{"gradient", elems, false}};
  if (elems < uint64_t{layers} * (bias_elems + 1))
    throw std::invalid_argument(
      fmt::format("--layers {}: the gradient ({} elements) is too "
                  "small for {} weights and {}-element biases",
                  layers, elems, layers, bias_elems));
  std::vector<tensor_spec> out;
  uint64_t weight = elems / layers - bias_elems;
  for (uint32_t i = 0; i < layers; ++i) {
    uint64_t w = i + 1 < layers
                   ? weight
                   : elems - uint64_t{layers - 1} * (weight + bias_elems) - bias_elems;
    out.push_back({fmt::format("layer{}.w", i), w, false});
    out.push_back({fmt::format("layer{}.b", i), bias_elems, false});
  }
  return out;
}

} // namespace rw::bench
