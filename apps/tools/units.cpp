#include "apps/tools/units.hpp"

#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::tools {

uint64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
    ++pos;
  if (pos == 0 || pos > 15)
    throw std::invalid_argument("'" + text + "' is not a size (for example 64MiB)");
  uint64_t value = std::stoull(text.substr(0, pos));
  auto unit = text.substr(pos);
  uint64_t mult;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "KB")
    mult = 1024;
  else if (unit == "M" || unit == "MiB" || unit == "MB")
    mult = 1024 * 1024;
  else if (unit == "G" || unit == "GiB" || unit == "GB")
    mult = 1024ull * 1024 * 1024;
  else
    throw std::invalid_argument("unknown size unit '" + unit + "' in '" + text
                                + "' (use B, KiB, MiB or GiB)");
  return value * mult;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
    return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0)
    return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

} // namespace rw::tools
