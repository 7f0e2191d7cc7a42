#include "apps/shell/repl.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <lua.hpp>

#include "apps/shell/detail/line_reader.hpp"
#include "apps/shell/format.hpp"
#include "apps/shell/interrupt.hpp"

namespace rw::shell {

namespace {

constexpr const char* prompt = "rw> ";
constexpr const char* continuation_prompt = ">> ";

// Message handler for lua_pcall: any error object as a string.
int to_message(lua_State* L) {
  if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
    lua_tostring(L, 1);
    return 1;
  }
  if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
    return 1;
  lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  return 1;
}

// Calls the function on top (its `nargs` arguments above it) with every result kept.
int call(lua_State* L, int nargs) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, to_message);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, LUA_MULTRET, base);
  lua_remove(L, base);
  return status;
}

std::string top_message(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::string text = msg ? msg : "(error object is not a string)";
  lua_pop(L, 1);
  return text;
}

// A chunk that failed only because it ended too early: read another line.
bool incomplete(lua_State* L, int status) {
  if (status != LUA_ERRSYNTAX)
    return false;
  size_t size = 0;
  const char* msg = lua_tolstring(L, -1, &size);
  constexpr size_t mark = sizeof("<eof>") - 1;
  return size >= mark && std::strcmp(msg + size - mark, "<eof>") == 0;
}

bool is_exit(const std::string& line) {
  auto first = line.find_first_not_of(" \t");
  auto last = line.find_last_not_of(" \t;");
  if (first == std::string::npos)
    return false;
  auto word = line.substr(first, last - first + 1);
  return word == "exit" || word == "quit" || word == "exit()" || word == "quit()";
}

// Compiles `chunk` as `return <chunk>`, else as a statement. LUA_OK leaves the function
// on the stack; otherwise the error message.
int compile(lua_State* L, const std::string& chunk) {
  std::string expression = "return " + chunk;
  if (luaL_loadbuffer(L, expression.data(), expression.size(), "=stdin") == LUA_OK)
    return LUA_OK;
  lua_pop(L, 1);
  return luaL_loadbuffer(L, chunk.data(), chunk.size(), "=stdin");
}

// Runs the compiled chunk on top and prints its results (or its error).
void run_entry(lua_State* L) {
  int base = lua_gettop(L) - 1;
  int status;
  {
    take_interrupt();
    interrupt_scope scope{L}; // Ctrl-C stops plain Lua loops too
    status = call(L, 0);
  }
  if (take_interrupt())
    std::fputs("\n", stdout); // after the terminal's ^C
  clear_interrupt_hook(L);
  if (status != LUA_OK) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", top_message(L).c_str());
    return;
  }
  for (int i = base + 1; i <= lua_gettop(L); ++i)
    std::printf("%s\n", format_value(L, i).c_str());
  std::fflush(stdout);
  lua_settop(L, base);
}

} // namespace

int run_interactive(lua_State* L, const repl_options& opts) {
  interrupt_scope session; // Ctrl-C at the prompt abandons the line, never the shell
  detail::line_reader reader{opts.history_file};
  if (!opts.banner.empty())
    std::printf("%s\n", opts.banner.c_str());
  std::string chunk;
  for (;;) {
    auto in = reader.read(chunk.empty() ? prompt : continuation_prompt);
    if (in.kind == detail::line_reader::result::end_of_input)
      return 0;
    if (in.kind == detail::line_reader::result::interrupted) {
      chunk.clear();
      continue;
    }
    if (chunk.empty() && is_exit(in.text))
      return 0;
    chunk = chunk.empty() ? in.text : chunk + "\n" + in.text;
    if (chunk.find_first_not_of(" \t") == std::string::npos) {
      chunk.clear();
      continue;
    }
    int status = compile(L, chunk);
    if (incomplete(L, status)) {
      lua_pop(L, 1);
      continue;
    }
    reader.remember(chunk); // a whole chunk is one history entry, as lua's prompt does
    chunk.clear();
    if (status != LUA_OK) {
      std::fprintf(stderr, "error: %s\n", top_message(L).c_str());
      continue;
    }
    run_entry(L);
  }
}

int run_script(lua_State* L, const script_source& source,
               const std::vector<std::string>& args) {
  int status;
  switch (source.kind) {
    case script_source::code:
      status = luaL_loadbuffer(L, source.text.data(), source.text.size(),
                               "=(command line)");
      break;
    case script_source::file:
      status = luaL_loadfile(L, source.text == "-" ? nullptr : source.text.c_str());
      break;
    default:
      status = luaL_loadfile(L, nullptr); // stdin
      break;
  }
  if (status == LUA_OK) {
    for (auto& a : args)
      lua_pushlstring(L, a.data(), a.size());
    status = call(L, static_cast<int>(args.size()));
  }
  if (status != LUA_OK) {
    std::fflush(stdout);
    std::fprintf(stderr, "rw-shell: %s\n", top_message(L).c_str());
    return 1;
  }
  lua_settop(L, 0);
  std::fflush(stdout);
  return 0;
}

void set_script_args(lua_State* L, const std::string& script,
                     const std::vector<std::string>& args) {
  lua_createtable(L, static_cast<int>(args.size()), 1);
  lua_pushlstring(L, script.data(), script.size());
  lua_rawseti(L, -2, 0);
  for (size_t i = 0; i < args.size(); ++i) {
    lua_pushlstring(L, args[i].data(), args[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setglobal(L, "arg");
}

std::string default_history_file() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.rw_shell_history" : std::string();
}

} // namespace rw::shell
