// The push_sparse checks (protocol/sparse.hpp): the first two bytes choose the chunk's
// length (1..65536 elements), the rest is the payload. A payload that passes the size
// check is either refused whole or gives a dense chunk whose sum is the pairs' sum.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "protocol/frame.hpp"
#include "protocol/sparse.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace pr = rw::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2)
    return 0;
  size_t length = (size_t(data[0]) | size_t(data[1]) << 8) + 1;
  auto* payload = reinterpret_cast<const std::byte*>(data + 2);
  size_t bytes = size - 2;
  auto size_why = pr::check_sparse_size(bytes, length);
  bool fits = bytes % sizeof(pr::sparse_pair) == 0 && bytes <= length * sizeof(float);
  if (size_why.empty() != fits)
    rw::fuzz::fail("check_sparse_size disagrees with its contract");
  if (!fits)
    return 0;
  std::vector<float> dense(length, 1.0f);
  auto why = pr::densify_sparse(payload, bytes, dense.data(), length);
  pr::sparse_pair p;
  bool in_range = true;
  for (size_t i = 0; i < bytes / sizeof p; ++i) {
    std::memcpy(&p, payload + i * sizeof p, sizeof p);
    in_range = in_range && p.index < length;
  }
  if (why.empty() != in_range)
    rw::fuzz::fail("densify_sparse accepted an index out of range, or refused none");
  if (!in_range)
    return 0;
  // Every element not named by a pair is zero: the 1.0 written above is gone.
  std::vector<bool> named(length, false);
  for (size_t i = 0; i < bytes / sizeof p; ++i) {
    std::memcpy(&p, payload + i * sizeof p, sizeof p);
    named[p.index] = true;
  }
  for (size_t i = 0; i < length; ++i)
    if (!named[i] && std::memcmp(&dense[i], "\0\0\0\0", 4) != 0)
      rw::fuzz::fail("an element no pair names is not zero");
  return 0;
}
