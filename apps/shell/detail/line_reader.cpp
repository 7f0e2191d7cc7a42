#include "apps/shell/detail/line_reader.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
// readline's headers need <cstdio> first.
#include <readline/history.h>
#include <readline/readline.h>

#include "apps/shell/interrupt.hpp"

namespace rw::shell::detail {

namespace {

// Keeps SIGINT blocked on this thread while it lives, except inside ppoll (with
// `waiting` as the mask): a Ctrl-C can then only land while the reader waits for input,
// never unnoticed while readline handles a key.
struct sigint_held {
  sigint_held() {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &before);
    waiting = before;
    sigdelset(&waiting, SIGINT);
  }
  ~sigint_held() { pthread_sigmask(SIG_SETMASK, &before, nullptr); }
  sigset_t before;
  sigset_t waiting;
};

// readline's callback interface hands the line to a plain function.
bool line_done = false;
std::optional<std::string> line_text; // nullopt: end of input

void on_line(char* line) {
  line_done = true;
  if (line) {
    line_text = std::string(line);
    std::free(line);
  } else {
    line_text.reset();
  }
  rl_callback_handler_remove();
}

} // namespace

line_reader::line_reader(std::string history_file)
  : history_file_(std::move(history_file)) {
  rl_catch_signals = 0; // SIGINT is the interrupt_scope's
  rl_readline_name = "rw-shell";
  using_history();
  // Multi-line chunks stay one entry across sessions: with timestamps in the file,
  // readline reads the lines between two timestamps back as one entry.
  history_write_timestamps = 1;
  history_multiline_entries = 1;
  stifle_history(history_lines);
  if (!history_file_.empty()) {
    if (read_history(history_file_.c_str()) != 0)
      write_history(history_file_.c_str()); // create it, so that appends work
    history_truncate_file(history_file_.c_str(), history_lines);
  }
}

line_reader::~line_reader() {
  rl_callback_handler_remove();
}

line_reader::result line_reader::read(const char* prompt) {
  line_done = false;
  rl_callback_handler_install(prompt, on_line);
  sigint_held held;
  while (!line_done) {
    if (take_interrupt()) {
      rl_replace_line("", 0);
      rl_callback_handler_remove();
      std::fputs("\n", rl_outstream ? rl_outstream : stdout);
      return {result::interrupted, {}};
    }
    pollfd input{fileno(rl_instream ? rl_instream : stdin), POLLIN, 0};
    int ready = ppoll(&input, 1, nullptr, &held.waiting);
    if (ready < 0 && errno == EINTR)
      continue; // Ctrl-C (taken above) or another signal (a resize): keep reading
    if (ready < 0) {
      rl_callback_handler_remove();
      return {result::end_of_input, {}};
    }
    rl_callback_read_char();
  }
  if (!line_text) {
    // End the prompt's line, unless readline did (it does when bracketed paste is on).
    const char* paste = rl_variable_value("enable-bracketed-paste");
    if (!paste || std::strcmp(paste, "on") != 0)
      std::fputs("\n", rl_outstream ? rl_outstream : stdout);
    return {result::end_of_input, {}};
  }
  return {result::line, *line_text};
}

void line_reader::remember(const std::string& entry) {
  if (entry.find_first_not_of(" \t\n") == std::string::npos)
    return;
  add_history(entry.c_str());
  if (!history_file_.empty())
    append_history(1, history_file_.c_str());
}

} // namespace rw::shell::detail
