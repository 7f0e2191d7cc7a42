// rw.inject: fault injection for tests and demos, through the cluster coordinator.
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <lua.hpp>

#include "apps/shell/detail/commands.hpp"
#include "apps/shell/detail/lua_guard.hpp"

namespace rw::shell::detail {

namespace {

constexpr const char* inject_fn = "rw.inject";

// opts[field] as a string, or `fallback` when absent.
std::string option_string(lua_State* L, const char* field, const std::string& fallback) {
  lua_getfield(L, 1, field);
  std::string out = fallback;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      throw std::invalid_argument(fmt::format("{}: {} must be a string, got {}",
                                              inject_fn, field, describe_value(L, -1)));
    out = lua_tostring(L, -1);
  }
  lua_pop(L, 1);
  return out;
}

} // namespace

int rw_inject(lua_State* L) {
  return protect(L, [&] {
    if (lua_type(L, 1) != LUA_TTABLE)
      throw std::invalid_argument(fmt::format(
        "{} expects {{job = NAME, kill = 'shard' [, node = NAME, shard = N]}} or {{job = "
        "NAME, kill = 'link' [, node = NAME, rank = R]}}, got {}",
        inject_fn, describe_value(L, 1)));
    check_options(L, 1, inject_fn, {"job", "kill", "node", "shard", "rank"});
    auto job = option_string(L, "job", "");
    if (job.empty())
      throw std::invalid_argument(fmt::format("{}: job = NAME is required", inject_fn));
    auto kill = option_string(L, "kill", "");
    if (kill.empty())
      throw std::invalid_argument(
        fmt::format("{}: kill = 'shard' or kill = 'link' is required", inject_fn));
    auto node = option_string(L, "node", "");
    // shard = N for kill = 'shard'; rank = R (default: every rank) for kill = 'link'.
    bool link = kill == "link";
    auto* field = link ? "rank" : "shard";
    auto* other = link ? "shard" : "rank";
    lua_getfield(L, 1, other);
    bool misplaced = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (misplaced)
      throw std::invalid_argument(
        fmt::format("{}: {} = goes with kill = '{}', not kill = '{}'", inject_fn, other,
                    link ? "shard" : "link", kill));
    auto index = option_number(L, 1, inject_fn, field, link ? -1.0 : 0.0, false,
                               "a whole number");
    bool every = link && index == -1.0; // rank absent: every rank
    if (!every && (index < 0 || index >= 4294967295.0 || index != std::floor(index)))
      throw std::invalid_argument(
        fmt::format("{}: {} must be a whole number from 0", inject_fn, field));
    auto which = every ? UINT32_MAX : static_cast<uint32_t>(index);
    auto done = ask(inject_fn,
                    [&] { return context(L).api->inject(job, kill, node, which); });
    lua_pushlstring(L, done.data(), done.size());
    return 1;
  });
}

} // namespace rw::shell::detail
