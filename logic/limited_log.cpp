#include "logic/limited_log.hpp"

#include <mutex>

#include "logic/refusal_log.hpp"

namespace rw::actors::detail {

void log_limited(spdlog::level::level_enum level, const std::string& peer,
                 const std::string& reason, const std::string& line) {
  static std::mutex mtx;
  static refusal_log book;
  auto colon = peer.rfind(':');
  auto host = colon == std::string::npos ? peer : peer.substr(0, colon);
  std::string key = host + ' ';
  for (char ch : reason)
    if (ch < '0' || ch > '9')
      key += ch;
  std::optional<uint64_t> unlogged;
  {
    std::lock_guard<std::mutex> guard{mtx};
    unlogged = book.admit(key);
  }
  if (!unlogged)
    return;
  if (*unlogged == 0)
    spdlog::log(level, "{}", line);
  else
    spdlog::log(level, "{} [{} more like it from {} in the last minute, not logged]",
                line, *unlogged, host);
}

} // namespace rw::actors::detail
