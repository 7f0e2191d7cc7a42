#pragma once
// Cap'n Proto messages to and from the bytes of a checkpoint file.

#include <cstring>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include "runtime/checkpoint/files.hpp"

namespace rw::runtime::checkpoint::detail {

inline std::vector<uint8_t> to_bytes(capnp::MallocMessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto raw = words.asBytes();
  return {raw.begin(), raw.end()};
}

/// Runs fn(reader) over the file's bytes; a decode failure names `what`.
template <class Fn>
auto read_message(const std::vector<uint8_t>& bytes, const std::string& what, Fn fn) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0)
    throw checkpoint_error(
      fmt::format("checkpoint: {} is {} bytes, not a whole number of "
                  "Cap'n Proto words: truncated or not a checkpoint",
                  what, bytes.size()));
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions opts;
    opts.traversalLimitInWords = words.size() * 2 + 1024;
    opts.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader{words.asPtr(), opts};
    return fn(reader);
  } catch (const kj::Exception& e) {
    throw checkpoint_error(
      fmt::format("checkpoint: {} does not decode: {}", what, e.getDescription().cStr()));
  }
}

} // namespace rw::runtime::checkpoint::detail
