#pragma once
// How the shell shows values. format_value renders the Lua value at a stack index as
// text, the way a person reads it: scalars as Lua writes them (strings quoted), tables
// as Lua constructors — the array part in order without keys, then the other keys
// sorted (numbers, then strings, then the rest). A table whose items all fit on one
// line within inline_width stays on one line; otherwise one item per line, indented
// two spaces per level. A table met again on its own path prints as
// <cycle>; past max_depth as {...}. Functions and userdata print as their type and
// address; no metamethod (__tostring, __index, __pairs) is ever called, so formatting
// never raises a Lua error and never runs user code. The stack is left as it was.
//
// human_bytes and human_rate write byte counts the way watch shows them.

#include <cstdint>
#include <string>

struct lua_State;

namespace rw::shell {

struct format_options {
  int max_depth = 16;
  /// A table whose one-line form fits in this many columns (with its indentation)
  /// stays on one line.
  int inline_width = 72;
};

std::string format_value(lua_State* L, int index, const format_options& opts = {});

/// "512 B", "31.5 KiB", "12.0 MiB", "1.2 GiB".
std::string human_bytes(uint64_t bytes);

/// human_bytes of a rate: "3.1 MiB/s".
std::string human_rate(double bytes_per_second);

} // namespace rw::shell
