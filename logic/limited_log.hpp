#pragma once
// Lines about what strangers did (refused frames, refused hellos, closed connections),
// logged once a minute per peer host and reason: the first at once, the next once the
// minute has passed, saying how many were not logged meanwhile. A peer that sends what
// is refused in a loop, from as many connections as it likes, fills no disk. One book
// for the process, shared by every actor (thread-safe).

#include <string>

#include <spdlog/spdlog.h>

namespace rw::actors::detail {

/// Logs `line` at `level` unless a line about the same host (`peer` is HOST:PORT or
/// HOST) and `reason` (its digits ignored: a byte count or a clock makes no new reason)
/// was logged in the last minute.
void log_limited(spdlog::level::level_enum level, const std::string& peer,
                 const std::string& reason, const std::string& line);

} // namespace rw::actors::detail
