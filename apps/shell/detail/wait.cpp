// rw.wait and rw.sleep: polling the cluster until a condition holds, bounded in time
// and (in the interactive shell) stopped by Ctrl-C.
#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "apps/shell/detail/commands.hpp"
#include "apps/shell/detail/job_tables.hpp"
#include "apps/shell/detail/lua_guard.hpp"
#include "apps/shell/interrupt.hpp"

namespace rw::shell::detail {

namespace {

constexpr const char* wait_fn = "rw.wait";
constexpr const char* states = "created, running, finished, stopped, failed, ended";

enum class verdict { holds, not_yet, never };

struct condition {
  enum { by_state, by_clock, by_function } kind = by_state;
  std::string target; // state
  double clock = 0;   // clock
  int fn_index = 0;   // function

  std::string describe() const {
    switch (kind) {
      case by_state: return target;
      case by_clock: return fmt::format("clock {}", clock);
      default: return "the condition";
    }
  }
};

condition read_condition(lua_State* L, int index) {
  condition c;
  switch (lua_type(L, index)) {
    case LUA_TSTRING:
      c.target = lua_tostring(L, index);
      for (auto* s : {"created", "running", "finished", "stopped", "failed", "ended"})
        if (c.target == s)
          return c;
      break;
    case LUA_TNUMBER:
      c.kind = condition::by_clock;
      c.clock = lua_tonumber(L, index);
      if (c.clock >= 0)
        return c;
      break;
    case LUA_TFUNCTION:
      c.kind = condition::by_function;
      c.fn_index = index;
      return c;
  }
  throw std::invalid_argument(fmt::format(
    "{}: the condition must be a state ({}), a clock every rank must reach (a number "
    ">= 0) or a function(job) returning true when done; got {}",
    wait_fn, states, describe_value(L, index)));
}

bool call_condition(lua_State* L, int fn_index, const actors::job_report& job) {
  lua_pushvalue(L, fn_index);
  push_job(L, job);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    std::string message = lua_type(L, -1) == LUA_TSTRING
                            ? lua_tostring(L, -1)
                            : fmt::format("(error object is {})", describe_value(L, -1));
    lua_pop(L, 1);
    throw lua_raise(
      fmt::format("{}: the condition function failed: {}", wait_fn, message));
  }
  bool holds = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return holds;
}

verdict check(lua_State* L, const condition& c, const actors::job_report& job) {
  bool ended = actors::is_ended(job.state);
  bool holds = false;
  switch (c.kind) {
    case condition::by_state:
      if (c.target == "created")
        holds = true;                 // every job the cluster reports was created
      else if (c.target == "running") // reached: running now, or ran and ended since
        holds = job.state == "running" || (ended && job.started_unix_ms != 0);
      else if (c.target == "ended")
        holds = ended;
      else
        holds = job.state == c.target;
      break;
    case condition::by_clock:
      holds = !job.ranks.empty()
              && std::all_of(job.ranks.begin(), job.ranks.end(), [&](auto& r) {
                   return (r.state == "live" || r.state == "left")
                          && static_cast<double>(r.clock) >= c.clock;
                 });
      break;
    case condition::by_function: holds = call_condition(L, c.fn_index, job); break;
  }
  if (holds)
    return verdict::holds;
  return ended ? verdict::never : verdict::not_yet; // an ended job no longer changes
}

std::string state_of(const actors::job_report& job) {
  auto late = lateness_text(job); // who holds it up, if anyone
  if (!late.empty())
    late = "; " + late;
  if (job.reason.empty())
    return fmt::format("state: {}{}", job.state, late);
  return fmt::format("state: {}, reason: {}{}", job.state, job.reason, late);
}

} // namespace

int rw_wait(lua_State* L) {
  return protect(L, [&] {
    auto& ctx = context(L);
    auto name = arg_string(L, 1, wait_fn, "a job name");
    auto cond = read_condition(L, 2);
    check_options(L, 3, wait_fn, {"interval", "timeout"});
    double interval = option_number(L, 3, wait_fn, "interval", 0.2, true);
    double timeout = option_number(L, 3, wait_fn, "timeout", 600, false);
    std::optional<interrupt_scope> scope;
    if (ctx.opts.interactive)
      scope.emplace();
    auto start = std::chrono::steady_clock::now();
    std::string unanswered; // the last status call the coordinator did not answer
    int unanswered_calls = 0;
    for (;;) {
      std::optional<actors::job_report> asked;
      try {
        asked = ctx.api->job_status(name);
      } catch (const shell_error& e) {
        // A coordinator slow to answer (busy, a slow disk) is asked again until the
        // wait's own timeout; any other failure ends the wait at once.
        if (e.code() != errc::timeout)
          throw shell_error(std::string(wait_fn) + ": " + e.what(), e.code());
        unanswered = e.what();
        ++unanswered_calls;
      }
      if (!asked) {
        std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
        if (waited.count() >= timeout)
          throw std::runtime_error(fmt::format(
            "{}: job '{}': no status within {} s: {} ({} status call(s) unanswered)",
            wait_fn, name, timeout, unanswered, unanswered_calls));
        if (!pause_for(std::min(interval, timeout - waited.count())))
          throw std::runtime_error(
            fmt::format("{}: interrupted before job '{}' reached {}", wait_fn, name,
                        cond.describe()));
        continue;
      }
      auto& job = *asked;
      switch (check(L, cond, job)) {
        case verdict::holds: push_job(L, job); return 1;
        case verdict::never:
          throw std::runtime_error(fmt::format("{}: job '{}' ended ({}) and will never "
                                               "reach {}",
                                               wait_fn, name, state_of(job),
                                               cond.describe()));
        case verdict::not_yet: break;
      }
      std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      if (elapsed.count() >= timeout)
        throw std::runtime_error(fmt::format("{}: job '{}' did not reach {} within {} s "
                                             "({})",
                                             wait_fn, name, cond.describe(), timeout,
                                             state_of(job)));
      if (!pause_for(std::min(interval, timeout - elapsed.count())))
        throw std::runtime_error(fmt::format("{}: interrupted before job '{}' reached {} "
                                             "({})",
                                             wait_fn, name, cond.describe(),
                                             state_of(job)));
    }
  });
}

int rw_time_ms(lua_State* L) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  lua_pushinteger(L,
                  static_cast<lua_Integer>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
  return 1;
}

int rw_sleep(lua_State* L) {
  return protect(L, [&] {
    double seconds = arg_number(L, 1, "rw.sleep", "a number of seconds");
    if (!(seconds >= 0))
      throw std::invalid_argument(
        fmt::format("rw.sleep expects a number of seconds >= 0, got {}", seconds));
    std::optional<interrupt_scope> scope;
    if (context(L).opts.interactive)
      scope.emplace();
    if (!pause_for(seconds))
      throw std::runtime_error("rw.sleep: interrupted");
    return 0;
  });
}

} // namespace rw::shell::detail
