#include "protocol/sparse.hpp"

#include <cstring>

#include <fmt/format.h>

#include "protocol/frame.hpp"

namespace rw::protocol {

std::string check_sparse_size(size_t payload_bytes, size_t length) {
  if (payload_bytes % sizeof(sparse_pair) != 0 || payload_bytes > length * sizeof(float))
    return fmt::format("{} bytes: a whole number of 8-byte pairs, at most {} bytes, is "
                       "expected",
                       payload_bytes, length * sizeof(float));
  return {};
}

std::string densify_sparse(const std::byte* pairs, size_t payload_bytes, float* dense,
                           size_t length) {
  auto count = payload_bytes / sizeof(sparse_pair);
  sparse_pair p;
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&p, pairs + i * sizeof(sparse_pair), sizeof p);
    if (p.index >= length)
      return fmt::format("sparse index {} is out of range ({} elements)", p.index,
                         length);
  }
  std::memset(dense, 0, length * sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&p, pairs + i * sizeof(sparse_pair), sizeof p);
    dense[p.index] += p.value;
  }
  return {};
}

} // namespace rw::protocol
