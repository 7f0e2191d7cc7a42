#include "logic/limited_log.hpp"

#include <mutex>

#include "logic/log_text.hpp"
#include "logic/refusal_log.hpp"

namespace rw::actors::detail {

void log_limited(spdlog::level::level_enum level, const std::string& peer,
                 const std::string& reason, const std::string& line) {
  static std::mutex mtx;
  static refusal_log book;
  auto colon = peer.rfind(':');
  auto host = colon == std::string::npos ? peer : peer.substr(0, colon);
  // The key is kept a minute: a reason a peer made long (a name it chose) is cut.
  std::string key = host.substr(0, 64) + ' ';
  for (char ch : reason.substr(0, 256))
    if (ch < '0' || ch > '9')
      key += ch;
  std::optional<uint64_t> unlogged;
  {
    std::lock_guard<std::mutex> guard{mtx};
    unlogged = book.admit(key);
  }
  if (!unlogged)
    return;
  // The callers cut the names they log (loggable); this bounds what they missed.
  auto text = line.size() > limited_line_max
                ? line.substr(0, limited_line_max)
                    + fmt::format("...(line cut: {} bytes)", line.size())
                : line;
  if (*unlogged == 0)
    spdlog::log(level, "{}", text);
  else
    spdlog::log(level, "{} [{} more like it from {} in the last minute, not logged]",
                text, *unlogged, loggable(host, 64));
}

} // namespace rw::actors::detail
