// rw-shell's interactive prompt driven through a real pseudo-terminal: readline's
// prompt, expression results, errors that keep the loop going, continuation lines,
// history recall with the up-arrow, Ctrl-C at a half-typed line, Ctrl-D to leave, and
// the history file. The shell talks to a single rack-agg node (it embeds the cluster
// coordinator). The shell is started with forkpty and always stopped by PID.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/node_process.hpp"

extern char** environ;

namespace rw_integration_shell_interactive {

using namespace rw;
using namespace std::chrono_literals;

namespace {

constexpr auto max_wait = std::chrono::milliseconds(10'000);  // the bound of any wait
constexpr auto term_grace = std::chrono::milliseconds(1'000); // SIGTERM, then SIGKILL

/// What the terminal shows, as text: ANSI escape sequences (cursor moves, bracketed
/// paste on/off) and carriage returns, bells and backspaces left out, so that "\r\n"
/// reads "\n". Stable under appending: an escape sequence cut off at the end is left
/// out until it is complete (and then left out as well).
std::string plain_text(const std::string& raw) {
  std::string out;
  size_t i = 0;
  while (i < raw.size()) {
    char c = raw[i];
    if (c == '\x1b') {
      if (i + 1 >= raw.size())
        break;
      if (raw[i + 1] == '[') { // CSI: parameters, then one final byte in @..~
        size_t j = i + 2;
        while (j < raw.size() && !(raw[j] >= '@' && raw[j] <= '~'))
          ++j;
        if (j >= raw.size())
          break;
        i = j + 1;
      } else {
        i += 2; // ESC and one character (ESC =, ESC >, ...)
      }
      continue;
    }
    if (c != '\r' && c != '\a' && c != '\b')
      out += c;
    ++i;
  }
  return out;
}

/// The raw transcript with control characters made visible, for failure messages.
std::string visible(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) {
    switch (c) {
      case '\r': out += "\\r"; break;
      case '\n': out += "\\n\n"; break;
      case '\x1b': out += "\\e"; break;
      default:
        if (c < 32 || c == 127)
          out += "\\x" + std::to_string(c);
        else
          out += static_cast<char>(c);
    }
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

/// A directory for the test (the shell's HOME), removed with everything in it at the end.
struct scratch_dir {
  explicit scratch_dir(std::string p) : path(std::move(p)) {
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  std::string path;
};

/// rw-shell on the slave side of a pseudo-terminal. Output is read from the master
/// with poll() and kept; wait_for() looks for text after what earlier waits matched,
/// so a test reads the terminal in order. The destructor stops the child by PID
/// (SIGTERM, a grace period, SIGKILL), reaps it and closes the master.
class pty_shell {
public:
  pty_shell(const std::vector<std::string>& args, const std::string& home) {
    // Everything the child needs is built before fork: after it, only exec.
    std::vector<std::string> argv_text{RW_SHELL_PATH};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      auto name = entry.substr(0, entry.find('='));
      if (name != "HOME" && name != "TERM" && name != "INPUTRC" && name != "COLUMNS"
          && name != "LINES")
        env_text.push_back(entry);
    }
    env_text.push_back("HOME=" + home);
    env_text.push_back("TERM=xterm");
    env_text.push_back("INPUTRC=/dev/null"); // no site or user key bindings
    std::vector<char*> argv;
    for (auto& a : argv_text)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_text)
      envp.push_back(e.data());
    envp.push_back(nullptr);

    winsize size{};
    size.ws_row = 40;
    size.ws_col = 200; // no line wrapping to reason about
    pid_ = forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ < 0)
      throw std::runtime_error(std::string("forkpty failed: ") + std::strerror(errno));
    if (pid_ == 0) {
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }

  ~pty_shell() {
    if (pid_ > 0 && !status_) {
      kill(pid_, SIGTERM);
      if (!wait_exit(term_grace)) {
        kill(pid_, SIGKILL);
        int status = 0;
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
      }
    }
    if (master_ >= 0)
      close(master_);
  }

  pty_shell(const pty_shell&) = delete;
  pty_shell& operator=(const pty_shell&) = delete;

  /// Writes `bytes` to the terminal, as if typed.
  void type(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      auto n = write(master_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw std::runtime_error("writing to the terminal failed");
      done += static_cast<size_t>(n);
    }
  }

  /// Whether `text` shows up (in plain_text) after the last match within `timeout`;
  /// on success the next wait starts after it.
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout = max_wait) {
    auto deadline = std::chrono::steady_clock::now() + std::min(timeout, max_wait);
    for (;;) {
      auto shown = plain_text(raw_);
      auto at = shown.find(text, cursor_);
      if (at != std::string::npos) {
        cursor_ = at + text.size();
        return true;
      }
      if (!read_some(deadline))
        return false;
    }
  }

  /// Waits (reading the terminal meanwhile) until the shell exits; its exit code, or
  /// 128 + signal, or nullopt at the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = max_wait) {
    auto deadline = std::chrono::steady_clock::now() + std::min(timeout, max_wait);
    while (!status_) {
      int status = 0;
      auto r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (r < 0 && errno != EINTR)
        break;
      if (std::chrono::steady_clock::now() >= deadline)
        break;
      if (!read_some(std::min(deadline, std::chrono::steady_clock::now() + 20ms)))
        std::this_thread::sleep_for(10ms); // nothing to read (or the slave is closed)
    }
    return status_;
  }

  /// Everything the terminal showed so far, escaped for a failure message.
  std::string transcript() const { return visible(raw_); }
  std::string plain() const { return plain_text(raw_); }

private:
  // Reads what is available, waiting at most until `deadline`; false when nothing came
  // (the deadline passed, or the slave side is closed).
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return false;
      pollfd p{master_, POLLIN, 0};
      int ready = poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0)
        return false;
      char buf[4096];
      auto n = read(master_, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) // EIO: every slave descriptor is closed (the shell exited)
        return false;
      raw_.append(buf, static_cast<size_t>(n));
      return true;
    }
  }

  pid_t pid_ = -1;
  int master_ = -1;
  std::string raw_;   // everything read from the master
  size_t cursor_ = 0; // in plain_text(raw_): where the next wait_for starts
  std::optional<int> status_;
};

} // namespace

TEST_CASE("rw-shell's interactive prompt on a terminal: results, errors, continuation, "
          "history, Ctrl-C, Ctrl-D",
          "[integration][shell]") {
  testing::node_process node{{}, testing::node_role{"rack-agg", false, {}}};
  scratch_dir home{testing::temp_path("shell-home")};
  auto history = home.path + "/history";
  {
    pty_shell shell{{"--connect", node.address(), "--history", history}, home.path};
    // On a miss, the next assertion reports what the terminal showed.
    auto shows = [&](const std::string& text) {
      bool ok = shell.wait_for(text);
      if (!ok)
        UNSCOPED_INFO("waited " << max_wait.count() << " ms for \"" << visible(text)
                                << "\"; the terminal showed:\n"
                                << shell.transcript());
      return ok;
    };
    auto entered = [&](const std::string& line) {
      shell.type(line + "\r");
      return shows(line); // the echo; what the command prints comes next
    };

    // 1. The banner, then the prompt.
    REQUIRE(shows("rw> "));

    // 2. An expression prints its value.
    REQUIRE(entered("#rw.nodes()"));
    CHECK(shows("\n1\n"));
    REQUIRE(shows("rw> "));

    // 3. A job created through the prompt; strings print quoted.
    REQUIRE(entered("rw.job_create{name='tty', workers=1}.state"));
    CHECK(shows("\n\"created\"\n"));
    REQUIRE(shows("rw> "));

    // 4. An error is printed and the loop goes on.
    REQUIRE(entered("rw.nope()"));
    CHECK(shows("\nerror: "));
    CHECK(shows("rw.nope is not a command"));
    REQUIRE(shows("rw> "));
    REQUIRE(entered("1+1"));
    CHECK(shows("\n2\n"));
    REQUIRE(shows("rw> "));

    // 5. An incomplete chunk asks for more with ">> ".
    REQUIRE(entered("for i = 1, 2 do"));
    CHECK(shows("\n>> "));
    REQUIRE(entered("print(i * 10)"));
    CHECK(shows("\n>> "));
    REQUIRE(entered("end"));
    CHECK(shows("\n10\n20\n"));
    REQUIRE(shows("rw> "));
    // The whole chunk is one history entry: one up-arrow brings all three lines back.
    shell.type("\x1b[A");
    CHECK(shows("print(i * 10)\nend"));
    shell.type("\r");
    CHECK(shows("\n10\n20\n"));
    REQUIRE(shows("rw> "));
    CHECK(count_of(shell.plain(), "\n10\n20\n") == 2);

    // 6. The up-arrow recalls the previous line; Enter runs it again.
    REQUIRE(entered("print('again')"));
    CHECK(shows("\nagain\n"));
    REQUIRE(shows("rw> "));
    shell.type("\x1b[A");
    CHECK(shows("print('again')")); // the recalled line, redrawn
    shell.type("\r");
    CHECK(shows("\nagain\n"));
    REQUIRE(shows("rw> "));
    CHECK(count_of(shell.plain(), "\nagain\n") == 2);

    // 7. Ctrl-C drops a half-typed line and shows a fresh prompt, even straight after
    // the echo (while readline may still be handling the keys). Wait for the echo
    // first: the terminal discards unread output when it sends SIGINT.
    shell.type("print('half");
    REQUIRE(shows("print('half"));
    shell.type("\x03");
    CHECK(shows("\nrw> "));
    REQUIRE(entered("6*7"));
    CHECK(shows("\n42\n"));
    REQUIRE(shows("rw> "));

    // 8. Ctrl-D on an empty line ends the shell with status 0.
    shell.type("\x04");
    auto code = shell.wait_exit();
    INFO("the terminal showed:\n" << shell.transcript());
    CHECK(code == std::optional<int>{0});
    CHECK(count_of(shell.plain(), "error:") == 1); // only rw.nope()
  }

  // 9. Every entered line is in the history file, the dropped one is not.
  auto lines = testing::read_file(history);
  INFO("history file:\n" << lines);
  CHECK_THAT(lines, Catch::Contains("#rw.nodes()\n"));
  CHECK_THAT(lines, Catch::Contains("rw.job_create{name='tty', workers=1}.state\n"));
  CHECK_THAT(lines, Catch::Contains("for i = 1, 2 do\nprint(i * 10)\nend\n"));
  CHECK(count_of(lines, "print('again')\n") == 2);
  CHECK_THAT(lines, !Catch::Contains("half"));
}

} // namespace rw_integration_shell_interactive
