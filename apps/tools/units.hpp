#pragma once
// Byte sizes and durations as people type them: "64MiB", "4KiB", "1GiB", "1048576";
// "50ms", "2s".

#include <cstdint>
#include <string>

namespace rw::tools {

/// Parses a byte size; binary units (K, KiB, M, MiB, G, GiB; B optional). Throws
/// std::invalid_argument with the text on a bad value.
uint64_t parse_bytes(const std::string& text);

/// "64 MiB", "512 KiB", "100 B".
std::string format_bytes(uint64_t bytes);

} // namespace rw::tools
