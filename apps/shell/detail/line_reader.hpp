#pragma once
// The interactive shell's input: GNU readline (line editing, history) driven through
// its callback interface, so that Ctrl-C at the prompt only abandons the line being
// typed (the caller's interrupt_scope turns SIGINT into a flag; poll() returns with
// EINTR and the reader takes it). History is kept in a file: read when the reader is
// made (trimmed to history_lines), and every entry the caller remembers appended at once,
// so a shell that ends by os.exit() or a crash loses nothing.

#include <optional>
#include <string>

namespace rw::shell::detail {

class line_reader {
public:
  static constexpr int history_lines = 1000;

  /// `history_file` empty: no history file.
  explicit line_reader(std::string history_file);
  ~line_reader();
  line_reader(const line_reader&) = delete;
  line_reader& operator=(const line_reader&) = delete;

  struct result {
    enum { line, interrupted, end_of_input } kind = line;
    std::string text;
  };

  /// Reads one line after showing `prompt`.
  result read(const char* prompt);

  /// Enters `entry` (a whole chunk, perhaps of several lines) into the history and
  /// appends it to the history file; blank entries are left out.
  void remember(const std::string& entry);

private:
  std::string history_file_;
};

} // namespace rw::shell::detail
