#include "apps/shell/format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <vector>

#include <fmt/format.h>
#include <lua.hpp>

namespace rw::shell {

namespace {

bool is_identifier(const std::string& s) {
  static const char* reserved[] = {
    "and",      "break",  "do",   "else", "elseif", "end",  "false", "for",
    "function", "goto",   "if",   "in",   "local",  "nil",  "not",   "or",
    "repeat",   "return", "then", "true", "until",  "while"};
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '_')
      return false;
  return std::none_of(std::begin(reserved), std::end(reserved),
                      [&](const char* r) { return s == r; });
}

std::string quote(const char* data, size_t size) {
  std::string out = "\"";
  for (size_t i = 0; i < size; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 32 || c == 127)
          out += fmt::format("\\{}", static_cast<int>(c));
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string number(lua_State* L, int index) {
  if (lua_isinteger(L, index))
    return std::to_string(static_cast<long long>(lua_tointeger(L, index)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.14g", static_cast<double>(lua_tonumber(L, index)));
  if (buf[std::strspn(buf, "-0123456789")] == '\0') // looks like an int: Lua adds .0
    std::strcat(buf, ".0");
  return buf;
}

// Any value but a table, without calling metamethods.
std::string scalar(lua_State* L, int index) {
  switch (lua_type(L, index)) {
    case LUA_TNONE:
    case LUA_TNIL: return "nil";
    case LUA_TBOOLEAN: return lua_toboolean(L, index) ? "true" : "false";
    case LUA_TNUMBER: return number(L, index);
    case LUA_TSTRING: {
      size_t size = 0;
      const char* data = lua_tolstring(L, index, &size); // a string stays a string
      return quote(data, size);
    }
    default:
      return fmt::format("<{}: {}>", lua_typename(L, lua_type(L, index)),
                         lua_topointer(L, index));
  }
}

// One non-array key of a table, kept in an auxiliary table at position `slot`.
struct key_entry {
  int order = 0; // 0 numbers, 1 strings, 2 booleans, 3 anything else
  double num = 0;
  std::string str;
  int slot = 0;
};

class printer {
public:
  printer(lua_State* L, const format_options& opts) : L_(L), opts_(opts) {}

  std::string render(int index, int indent) {
    if (lua_type(L_, index) != LUA_TTABLE)
      return scalar(L_, index);
    const void* self = lua_topointer(L_, index);
    if (std::find(path_.begin(), path_.end(), self) != path_.end())
      return "<cycle>";
    if (static_cast<int>(path_.size()) >= opts_.max_depth || !lua_checkstack(L_, 8))
      return "{...}";
    path_.push_back(self);
    auto text = render_table(index, indent);
    path_.pop_back();
    return text;
  }

private:
  std::string render_table(int t, int indent) {
    lua_Integer n = 0;
    while (lua_rawgeti(L_, t, n + 1) != LUA_TNIL) {
      lua_pop(L_, 1);
      ++n;
    }
    lua_pop(L_, 1);
    auto keys = collect_keys(t, n); // pushes the auxiliary table
    int aux = lua_gettop(L_);
    std::vector<std::pair<std::string, std::string>>
      items;                          // key text ("" = array), value
    bool multiline = false;           // some item needs several lines
    auto add = [&](std::string key) { // the value is on top of the stack
      items.emplace_back(std::move(key), render(lua_gettop(L_), indent + 2));
      multiline = multiline || items.back().second.find('\n') != std::string::npos;
      lua_pop(L_, 1);
    };
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L_, t, i);
      add({});
    }
    for (auto& k : keys) {
      lua_rawgeti(L_, aux, k.slot);
      std::string key_text = k.order == 1 && is_identifier(k.str)
                               ? k.str
                               : "[" + render(lua_gettop(L_), indent + 2) + "]";
      lua_rawget(L_, t);
      add(key_text + " = ");
    }
    lua_pop(L_, 1); // aux
    if (items.empty())
      return "{}";
    if (!multiline) {
      std::string line = "{";
      for (size_t i = 0; i < items.size(); ++i)
        line += (i ? ", " : "") + items[i].first + items[i].second;
      line += "}";
      if (indent + static_cast<int>(line.size()) <= opts_.inline_width)
        return line;
    }
    std::string pad(indent + 2, ' ');
    std::string out = "{\n";
    for (size_t i = 0; i < items.size(); ++i)
      out += pad + items[i].first + items[i].second
             + (i + 1 < items.size() ? ",\n" : "\n");
    return out + std::string(indent, ' ') + "}";
  }

  // Keys other than 1..n, sorted; leaves a table holding them (by slot) on the stack.
  std::vector<key_entry> collect_keys(int t, lua_Integer n) {
    std::vector<key_entry> keys;
    lua_newtable(L_);
    int aux = lua_gettop(L_);
    lua_pushnil(L_);
    while (lua_next(L_, t) != 0) {
      lua_pop(L_, 1); // the value; the key stays for lua_next
      if (lua_isinteger(L_, -1) && lua_tointeger(L_, -1) >= 1
          && lua_tointeger(L_, -1) <= n)
        continue;
      key_entry k;
      k.slot = static_cast<int>(keys.size()) + 1;
      switch (lua_type(L_, -1)) {
        case LUA_TNUMBER:
          k.order = 0;
          k.num = lua_tonumber(L_, -1);
          break;
        case LUA_TSTRING: {
          size_t size = 0;
          const char* data = lua_tolstring(L_, -1, &size);
          k.order = 1;
          k.str.assign(data, size);
          break;
        }
        case LUA_TBOOLEAN:
          k.order = 2;
          k.num = lua_toboolean(L_, -1);
          break;
        default:
          k.order = 3;
          k.str = scalar(L_, -1);
          break;
      }
      lua_pushvalue(L_, -1);
      lua_rawseti(L_, aux, k.slot);
      keys.push_back(std::move(k));
    }
    std::sort(keys.begin(), keys.end(), [](const key_entry& a, const key_entry& b) {
      if (a.order != b.order)
        return a.order < b.order;
      if (a.order == 0 || a.order == 2)
        return a.num < b.num;
      return a.str < b.str;
    });
    return keys;
  }

  lua_State* L_;
  format_options opts_;
  std::vector<const void*> path_; // the tables being printed, outermost first
};

} // namespace

std::string format_value(lua_State* L, int index, const format_options& opts) {
  return printer{L, opts}.render(lua_absindex(L, index), 0);
}

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024)
    return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string human_rate(double bytes_per_second) {
  if (!(bytes_per_second > 0))
    return "0 B/s";
  return human_bytes(static_cast<uint64_t>(bytes_per_second)) + "/s";
}

} // namespace rw::shell
