#pragma once
// The exit codes every RackWeave program uses (rw-node, rw-shell, rw-bench), and the
// command-line parse that maps CLI11's own codes onto them.

#include <optional>

#include <CLI/CLI.hpp>

namespace rw::tools {

enum exit_code : int {
  exit_ok = 0,          // done, or --help / --version
  exit_failed = 1,      // the operation failed (a job, a benchmark, a script)
  exit_usage = 2,       // a bad flag, value or configuration
  exit_unreachable = 3, // a node or coordinator that cannot be reached
};

/// Parses argv into `app`. Nothing: go on. Else the code to exit with, after CLI11 has
/// printed the help, the version or the error: exit_ok for --help and --version,
/// exit_usage for any parse error (CLI11's own codes, 105 and up, say nothing useful).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_usage;
  }
}

} // namespace rw::tools
