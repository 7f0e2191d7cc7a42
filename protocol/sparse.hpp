#pragma once
// A push_sparse payload: (index, value) pairs of 8 bytes (frame.hpp: sparse_pair) for
// one chunk. The node checks its size before reading it and its indexes before applying
// any of it, then adds it into a dense chunk, so shards sum sparse and dense pushes the
// same way. Both checks are here, apart from the poller, so they are fuzzed on their own
// (tests/fuzz/fuzz_sparse.cpp).

#include <cstddef>
#include <string>

namespace rw::protocol {

/// "" when `payload_bytes` can be a sparse chunk of `length` elements: a whole number of
/// pairs, never more bytes than the dense chunk (a worker sends dense then). Else why not.
std::string check_sparse_size(size_t payload_bytes, size_t length);

/// Writes the dense chunk of `length` floats into `dense`: zeros, plus each pair's value
/// added at its index, in order. `pairs` holds `payload_bytes` (checked by
/// check_sparse_size; may be unaligned). An index out of range refuses the whole chunk:
/// returns why, and `dense` is left unspecified. Returns "" on success.
std::string densify_sparse(const std::byte* pairs, size_t payload_bytes, float* dense,
                           size_t length);

} // namespace rw::protocol
