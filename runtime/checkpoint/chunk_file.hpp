#pragma once
// One node's chunk file: the state of the chunks it homed at the checkpoint's clock
// (schemas/checkpoint.capnp ChunkFile). Encoding keeps every float's bits.

#include <cstdint>
#include <string>
#include <vector>

namespace rw::runtime::checkpoint {

/// One chunk's state between two BSP steps.
struct chunk_record {
  uint32_t tensor = 0;
  uint32_t chunk = 0;
  uint64_t version = 0;
  std::vector<float> params;
  std::vector<float> m; // empty when the optimizer has no such array
  std::vector<float> v;
};

struct chunk_file {
  std::string job;
  uint64_t clock = 0;
  std::string node;
  std::vector<chunk_record> chunks;
};

std::vector<uint8_t> encode(const chunk_file& f);

/// Throws checkpoint_error (files.hpp) if `bytes` is not a chunk file.
chunk_file decode_chunk_file(const std::vector<uint8_t>& bytes, const std::string& what);

} // namespace rw::runtime::checkpoint
