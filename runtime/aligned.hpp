#pragma once
// Cache-line aligned float arrays for chunk state (parameters, optimizer moments).

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "rackweave/defaults.hpp"

namespace rw::runtime {

struct free_deleter {
  void operator()(float* p) const noexcept { std::free(p); }
};

using aligned_floats = std::unique_ptr<float[], free_deleter>;

/// n zeroed floats, aligned to a cache line (n may be 0: returns null).
inline aligned_floats make_aligned_floats(size_t n) {
  if (n == 0)
    return {};
  auto bytes = (n * sizeof(float) + defaults::cache_line - 1) / defaults::cache_line
               * defaults::cache_line;
  auto* p = static_cast<float*>(std::aligned_alloc(defaults::cache_line, bytes));
  if (p == nullptr)
    throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return aligned_floats{p};
}

} // namespace rw::runtime
