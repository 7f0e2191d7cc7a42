#pragma once
// The job the integration tests run: three tensors whose sizes are not multiples of
// the chunk size, one of them initialised by rank 0, and gradients every process can
// recompute. Shared by rw-test-worker and the tests that check its output against a
// single-process reference.

#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/job_spec.hpp"

namespace rw::testing {

constexpr uint32_t fixture_chunk_bytes = 4096; // 1024 floats per chunk

inline job_spec fixture_job(const std::string& name, uint32_t workers,
                            optimizer_kind kind) {
  job_spec spec;
  spec.name = name;
  spec.num_workers = workers;
  spec.chunk_bytes = fixture_chunk_bytes;
  spec.optimizer.kind = kind;
  spec.optimizer.learning_rate = 0.05f;
  spec.optimizer.momentum = 0.9f;
  spec.optimizer.weight_decay = kind == optimizer_kind::sgd ? 0.01f : 0.0f;
  spec.tensors = {{"alpha", 1000, true}, {"beta", 5000, false}, {"gamma", 3333, false}};
  return spec;
}

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A value in [-1, 1) for any (a, b, c, d).
inline float noise(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  auto h = mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
  return static_cast<float>(static_cast<int32_t>(h >> 32)) / 2147483648.0f;
}

/// Rank's gradient for tensor t at step s (0-based).
inline std::vector<float> fixture_gradient(uint32_t rank, uint32_t step, uint32_t tensor,
                                           uint64_t elements) {
  std::vector<float> g(elements);
  for (uint64_t i = 0; i < elements; ++i)
    g[i] = noise(rank, step, tensor, i);
  return g;
}

/// Rank 0's initial values for tensors declared with has_init.
inline std::vector<float> fixture_init(uint32_t tensor, uint64_t elements) {
  std::vector<float> v(elements);
  for (uint64_t i = 0; i < elements; ++i)
    v[i] = noise(0xfeed, tensor, i, 7) * 0.5f;
  return v;
}

} // namespace rw::testing
