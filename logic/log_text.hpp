#pragma once
// Text a peer chose (a job name, a rack, a picked_by, a reason built from them), made
// fit for a log line: cut to a bound, and control characters shown as '?', so a 1 MiB
// name sent in a hello costs the log a line, not a megabyte, and cannot forge lines.

#include <cstddef>
#include <string>
#include <string_view>

namespace rw::actors::detail {

/// The longest peer-chosen text a log line carries whole.
constexpr size_t loggable_max = 96;

/// `text` cut to `max` bytes (then "...(N bytes)"), control characters replaced by '?'.
std::string loggable(std::string_view text, size_t max = loggable_max);

/// The longest line log_limited writes (the rest is cut, saying how much).
constexpr size_t limited_line_max = 2048;

} // namespace rw::actors::detail
