// rw.job_set: changes a running job's optimizer hyper-parameters from a clock on, on
// every node of the job at once (the cluster coordinator's two rounds:
// actors/cluster/hyper.cpp).
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <lua.hpp>

#include "apps/shell/detail/commands.hpp"
#include "apps/shell/detail/lua_guard.hpp"

namespace rw::shell::detail {

namespace {

constexpr const char* job_set_fn = "rw.job_set";

// opts[field] as a number, or nothing when absent.
std::optional<float> option_float(lua_State* L, const char* field) {
  lua_getfield(L, 1, field);
  std::optional<float> out;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      throw std::invalid_argument(fmt::format("{}: {} must be a number, got {}",
                                              job_set_fn, field, describe_value(L, -1)));
    out = static_cast<float>(lua_tonumber(L, -1));
  }
  lua_pop(L, 1);
  return out;
}

} // namespace

int rw_job_set(lua_State* L) {
  return protect(L, [&] {
    if (lua_type(L, 1) != LUA_TTABLE)
      throw std::invalid_argument(fmt::format("{} expects {{name = NAME, at_clock = C, "
                                              "lr = ..., momentum = ..., weight_decay = "
                                              "..., beta1 = ..., beta2 = ...}}, got {}",
                                              job_set_fn, describe_value(L, 1)));
    check_options(
      L, 1, job_set_fn,
      {"name", "at_clock", "lr", "momentum", "weight_decay", "beta1", "beta2"});
    lua_getfield(L, 1, "name");
    if (lua_type(L, -1) != LUA_TSTRING)
      throw std::invalid_argument(
        fmt::format("{}: name = NAME (a string) is required", job_set_fn));
    std::string name = lua_tostring(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "at_clock");
    bool given = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (!given)
      throw std::invalid_argument(fmt::format(
        "{}: at_clock = C is required: the clock whose step first uses the new values "
        "(rw.job_status(name) shows where the job is)",
        job_set_fn));
    auto at = option_number(L, 1, job_set_fn, "at_clock", 0.0, false,
                            "a whole number of clocks");
    if (at != std::floor(at) || at >= 1.8e19)
      throw std::invalid_argument(
        fmt::format("{}: at_clock must be a whole number", job_set_fn));
    hyper_change change;
    change.at_clock = static_cast<uint64_t>(at);
    change.learning_rate = option_float(L, "lr");
    change.momentum = option_float(L, "momentum");
    change.weight_decay = option_float(L, "weight_decay");
    change.beta1 = option_float(L, "beta1");
    change.beta2 = option_float(L, "beta2");
    if (auto why = validate(change); !why.empty())
      throw std::invalid_argument(fmt::format("{}: {}", job_set_fn, why));
    auto reached = ask(job_set_fn, [&] { return context(L).api->job_set(name, change); });
    lua_pushinteger(L, static_cast<lua_Integer>(reached));
    return 1;
  });
}

} // namespace rw::shell::detail
