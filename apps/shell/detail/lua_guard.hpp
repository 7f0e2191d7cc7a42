#pragma once
// How the rw module's C functions meet Lua. Debian's liblua5.4 raises errors with
// longjmp, which must never jump over a live C++ object. So every rw function runs its
// body through `protect`: the body reports failure by throwing a C++ exception, and
// protect turns it into a Lua error only after the body's objects are destroyed. A
// body calls only Lua functions that cannot raise (raw table access, pushes, pcall) —
// the one exception being Lua running out of memory. The arg_* helpers check an
// argument's type without raising (they throw std::invalid_argument instead).

#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <lua.hpp>

#include "apps/shell/lua_rw.hpp"

namespace rw::shell::detail {

/// An error whose message already says where it comes from: raised without the
/// caller's position (errors of user functions called back from C).
class lua_raise : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What every rw function reaches through its first upvalue.
struct rw_context {
  cluster_api* api = nullptr;
  rw_options opts;
};

inline rw_context& context(lua_State* L) {
  return *static_cast<rw_context*>(lua_touserdata(L, lua_upvalueindex(1)));
}

/// Runs `body` (returning how many results it pushed); any exception becomes a Lua
/// error "<chunk>:<line>: <message>".
template <class Body>
int protect(lua_State* L, Body&& body) {
  {
    bool where = true;
    std::string message;
    try {
      return body();
    } catch (const lua_raise& e) {
      message = e.what();
      where = false;
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "unexpected C++ exception";
    }
    if (where)
      luaL_where(L, 1);
    else
      lua_pushliteral(L, "");
    lua_pushlstring(L, message.data(), message.size());
    lua_concat(L, 2);
  } // message destroyed here, before the longjmp
  return lua_error(L);
}

/// Runs one cluster_api call; its shell_error comes back prefixed with `fn`.
template <class Call>
auto ask(const char* fn, Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const shell_error& e) {
    throw shell_error(std::string(fn) + ": " + e.what());
  }
}

/// "a string", "the number 2.5", "'four'", "a table": the value at `index`, for errors.
std::string describe_value(lua_State* L, int index);

/// The string at `index`, or throws "<fn> expects <what> (a string), got ...".
std::string arg_string(lua_State* L, int index, const char* fn, const char* what);

/// The number at `index` (a Lua number, not a numeric string), or throws.
double arg_number(lua_State* L, int index, const char* fn, const char* what);

/// Checks that the value at `index` is nil or a table whose keys are all among
/// `allowed`; throws naming the unknown key and the allowed ones.
void check_options(lua_State* L, int index, const char* fn,
                   std::initializer_list<const char*> allowed);

/// opts[field] (opts at `index`, may be nil) as a number >= 0, or > 0 when `positive`;
/// `fallback` when absent; an error calls it `what` ("a number of seconds").
double option_number(lua_State* L, int index, const char* fn, const char* field,
                     double fallback, bool positive,
                     const char* what = "a number of seconds");

} // namespace rw::shell::detail
