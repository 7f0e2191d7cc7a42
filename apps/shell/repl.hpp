#pragma once
// Running Lua in rw-shell, interactively or from a script. Both expect a lua_State
// with the standard libraries and the rw module installed.
//
// run_interactive: a readline prompt "rw> " (">> " while a chunk is incomplete: a
// syntax error at <eof> keeps reading). Each entry is first tried as `return <entry>`,
// so expressions print their values (format_value, one per line); errors print to
// stderr as "error: <message>" and the loop goes on. Ctrl-C abandons the line being
// typed, or stops the running chunk (rw.wait / rw.sleep raise "interrupted", rw.watch
// returns, plain Lua loops are stopped by a hook). `exit`, `quit` or Ctrl-D end it.
//
// run_script: one chunk from a file, a string or stdin, run with `...` = the script
// arguments. An error prints "rw-shell: <message>" to stderr.

#include <string>
#include <vector>

struct lua_State;

namespace rw::shell {

struct repl_options {
  std::string history_file; // "" keeps no history
  std::string banner;       // printed before the first prompt ("" for none)
};

/// Returns 0 (the loop ends only when asked to).
int run_interactive(lua_State* L, const repl_options& opts);

struct script_source {
  enum kind_t { file, code, standard_input } kind = standard_input;
  std::string text; // the file name (file; "-" also means stdin) or the Lua code (code)
};

/// Returns 0 when the chunk ran to its end, 1 when it failed to load or raised.
int run_script(lua_State* L, const script_source& source,
               const std::vector<std::string>& args);

/// Sets the global `arg`: arg[0] = `script`, arg[1..] = `args` (lua's convention).
void set_script_args(lua_State* L, const std::string& script,
                     const std::vector<std::string>& args);

/// $HOME/.rw_shell_history, or "" without HOME.
std::string default_history_file();

} // namespace rw::shell
