#pragma once
// rw-node's log: stderr, and with --log-file a file rotated by size (spdlog's rotating
// sink); as text lines or, with --log-format json, one JSON object per line:
//   {"time":"2026-11-26T16:03:21.123+00:00","level":"info","node":"n1","msg":"..."}
// (the message escaped as JSON strings are).

#include <string>

#include <cstdint>

namespace rw::tools {

struct log_options {
  std::string file;            // "": stderr only
  std::string format = "text"; // or json
  uint32_t max_mib = 100;      // the file rotates at this size
  uint32_t files = 5;          // rotated files kept
  std::string level = "info";
};

/// Makes the default logger rw-node's, as `o` says; `node` names the node in JSON
/// lines. Throws std::runtime_error if the log file cannot be opened.
void setup_node_logging(const log_options& o, const std::string& node);

/// `s` as the inside of a JSON string (quotes, backslashes, control characters escaped;
/// bytes that are not UTF-8 replaced by U+FFFD).
std::string json_escape(const std::string& s);

} // namespace rw::tools
