#include "logic/log_text.hpp"

#include <fmt/format.h>

namespace rw::actors::detail {

std::string loggable(std::string_view text, size_t max) {
  const bool cut = text.size() > max;
  std::string out{cut ? text.substr(0, max) : text};
  for (auto& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
      ch = '?';
  if (cut)
    out += fmt::format("...({} bytes)", text.size());
  return out;
}

} // namespace rw::actors::detail
