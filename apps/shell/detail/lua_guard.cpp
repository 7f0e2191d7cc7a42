#include "apps/shell/detail/lua_guard.hpp"

#include <fmt/format.h>

#include "apps/shell/format.hpp"

namespace rw::shell::detail {

std::string describe_value(lua_State* L, int index) {
  switch (lua_type(L, index)) {
    case LUA_TNONE:
    case LUA_TNIL: return "nothing";
    case LUA_TSTRING:
    case LUA_TNUMBER: return format_value(L, index);
    case LUA_TBOOLEAN: return lua_toboolean(L, index) ? "true" : "false";
    case LUA_TTABLE: return "a table";
    case LUA_TFUNCTION: return "a function";
    default: return fmt::format("a {}", lua_typename(L, lua_type(L, index)));
  }
}

std::string arg_string(lua_State* L, int index, const char* fn, const char* what) {
  if (lua_type(L, index) != LUA_TSTRING)
    throw std::invalid_argument(fmt::format("{} expects {} (a string), got {}", fn, what,
                                            describe_value(L, index)));
  size_t size = 0;
  const char* data = lua_tolstring(L, index, &size);
  return {data, size};
}

double arg_number(lua_State* L, int index, const char* fn, const char* what) {
  if (lua_type(L, index) != LUA_TNUMBER)
    throw std::invalid_argument(fmt::format("{} expects {} (a number), got {}", fn, what,
                                            describe_value(L, index)));
  return lua_tonumber(L, index);
}

void check_options(lua_State* L, int index, const char* fn,
                   std::initializer_list<const char*> allowed) {
  index = lua_absindex(L, index);
  if (lua_isnoneornil(L, index))
    return;
  std::string names;
  for (auto* a : allowed)
    names += (names.empty() ? "" : ", ") + std::string(a);
  if (lua_type(L, index) != LUA_TTABLE)
    throw std::invalid_argument(
      fmt::format("{}: options must be a table ({{{}}}), got {}", fn, names,
                  describe_value(L, index)));
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    lua_pop(L, 1);
    bool known = false;
    if (lua_type(L, -1) == LUA_TSTRING) {
      std::string key = lua_tostring(L, -1);
      for (auto* a : allowed)
        known = known || key == a;
    }
    if (!known) {
      auto key = describe_value(L, -1);
      lua_pop(L, 1);
      throw std::invalid_argument(
        fmt::format("{}: unknown option {} (options: {})", fn, key, names));
    }
  }
}

double option_number(lua_State* L, int index, const char* fn, const char* field,
                     double fallback, bool positive, const char* what) {
  if (lua_isnoneornil(L, index))
    return fallback;
  index = lua_absindex(L, index);
  lua_pushstring(L, field);
  lua_rawget(L, index);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return fallback;
  }
  bool ok = lua_type(L, -1) == LUA_TNUMBER;
  double value = ok ? lua_tonumber(L, -1) : 0;
  auto got = describe_value(L, -1);
  lua_pop(L, 1);
  if (!ok || !(positive ? value > 0 : value >= 0))
    throw std::invalid_argument(fmt::format("{}: option {} must be {} {} 0, got {}", fn,
                                            field, what, positive ? ">" : ">=", got));
  return value;
}

} // namespace rw::shell::detail
