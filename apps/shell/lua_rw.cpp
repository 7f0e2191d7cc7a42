#include "apps/shell/lua_rw.hpp"

#include <new>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <lua.hpp>

#include "apps/shell/detail/commands.hpp"
#include "apps/shell/detail/job_args.hpp"
#include "apps/shell/detail/job_tables.hpp"
#include "apps/shell/detail/lua_guard.hpp"
#include "apps/shell/format.hpp"

namespace rw::shell {

namespace detail {

namespace {

struct command {
  const char* name;
  lua_CFunction fn;
  const char* usage;
  const char* help;
};

// In the order rw.help lists them.
const command commands[] = {
  {"nodes", rw_nodes, "rw.nodes()",
   "the live nodes: {id, name, role, endpoints, shards, "
   "jobs, last_seen_ms}; #rw.nodes() counts them"},
  {"jobs", rw_jobs, "rw.jobs()", "every job, in creation order (job tables)"},
  {"job_create", rw_job_create, "rw.job_create{name=, workers=, ...}",
   "creates a job; also consistency, compression ('none', 'bf16', 'fp16', 'topk:R', "
   "'topk:R,warmup=N'), "
   "compress_updates, optimizer, lr, momentum, beta1, beta2, epsilon, "
   "weight_decay, rescale, eta, chunk_bytes, node, nodes, racks, reduction, restore (a "
   "checkpoint dir), checkpoint_every, checkpoint_dir, tensors (a list: {{'w', 1024}, "
   "{name = 'b', elements = 16, has_init = true}}; else the first worker declares them). "
   "Returns the job with its token"},
  {"job_status", rw_job_status, "rw.job_status(name)", "the job: state, ranks, totals"},
  {"job_stop", rw_job_stop, "rw.job_stop(name)", "stops the job; returns it"},
  {"job_set", rw_job_set,
   "rw.job_set{name=, at_clock=, lr=, momentum=, weight_decay=, beta1=, beta2=}",
   "changes a running BSP job's optimizer hyper-parameters (those given) for the step of "
   "clock at_clock and every later one, on every chunk, every node; refused if a chunk "
   "has run that step already. Returns the highest clock the job had reached"},
  {"checkpoint", rw_checkpoint, "rw.checkpoint(name, dir [, {clock=}])",
   "writes the job's parameters, optimizer state and clock into dir (new or empty), "
   "consistent at one clock (the next one, or clock=; a finished job as it ended); "
   "returns {dir, clock, files, bytes}. rw.job_create{..., restore = dir} starts a job "
   "from it; checkpoint_every = N, checkpoint_dir = D take one every N clocks"},
  {"inject", rw_inject, "rw.inject{job=, kill='shard'|'link' [, node=, shard= | rank=]}",
   "fault injection for tests and demos: 'shard' crashes a shard of the job's node (its "
   "supervisor restarts it with its chunks' state; the job goes on); 'link' closes the "
   "connections of the job's worker rank (default: every rank) on that node, as a cut "
   "link would (the workers say hello again and re-send); returns what it did"},
  {"job_delete", rw_job_delete, "rw.job_delete(name)",
   "removes the job from the registry; true"},
  {"node_drain", rw_node_drain, "rw.node_drain(name)",
   "the node takes no new jobs, and each flat BSP job on several nodes moves its chunks "
   "there, with their state, to the other nodes while it trains; returns what moved"},
  {"node_join", rw_node_join, "rw.node_join(name)",
   "the node takes new jobs (again, after a drain), and each flat BSP job on two nodes "
   "or "
   "more moves the chunks the ring with it homes there, with their state, onto it while "
   "it trains (its workers connect to it); returns what moved"},
  {"wait", rw_wait, "rw.wait(name, cond [, {interval=, timeout=}])",
   "until cond holds: a state (created, running, finished, stopped, failed, ended), a "
   "clock every rank reached, or a function(job); returns the job"},
  {"watch", rw_watch, "rw.watch(name [, {interval=, seconds=}])",
   "shows the job's progress until it ends (Ctrl-C stops); returns the job"},
  {"sleep", rw_sleep, "rw.sleep(seconds)", "pauses the script"},
  {"time_ms", rw_time_ms, "rw.time_ms()",
   "milliseconds since the Unix epoch (the system clock, as date +%s%3N): for timing "
   "what a script does, or comparing with other programs' clocks"},
  {"coordinator", rw_coordinator, "rw.coordinator()", "the coordinator's address"},
  {"show", rw_show, "rw.show(value)", "prints a value, tables in full"},
  {"help", rw_help, "rw.help()", "this list"},
};

std::string command_names() {
  std::string names;
  for (auto& c : commands)
    names += (names.empty() ? "" : ", ") + std::string(c.name);
  return names;
}

std::string job_name(lua_State* L, const char* fn) {
  return arg_string(L, 1, fn, "a job name");
}

// __index of the rw table: only reached for names that are not commands.
int unknown_command(lua_State* L) {
  return protect(L, [&]() -> int {
    std::string key = lua_type(L, 2) == LUA_TSTRING
                        ? "rw." + std::string(lua_tostring(L, 2))
                        : "rw[" + describe_value(L, 2) + "]";
    throw std::invalid_argument(
      fmt::format("{} is not a command; commands: {}", key, command_names()));
  });
}

} // namespace

int rw_nodes(lua_State* L) {
  return protect(L, [&] {
    auto nodes = context(L).api->nodes();
    lua_createtable(L, static_cast<int>(nodes.size()), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      push_node(L, nodes[i]);
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
    return 1;
  });
}

int rw_jobs(lua_State* L) {
  return protect(L, [&] {
    auto jobs = context(L).api->jobs();
    lua_createtable(L, static_cast<int>(jobs.size()), 0);
    for (size_t i = 0; i < jobs.size(); ++i) {
      push_job(L, jobs[i]);
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
    return 1;
  });
}

int rw_job_create(lua_State* L) {
  return protect(L, [&] {
    auto req = read_create_request(L, 1);
    auto created = context(L).api->job_create(req.spec, req.placement);
    push_job(L, created.job);
    lua_pushlstring(L, created.token.data(), created.token.size());
    lua_setfield(L, -2, "token");
    return 1;
  });
}

int rw_job_status(lua_State* L) {
  return protect(L, [&] {
    auto name = job_name(L, "rw.job_status");
    push_job(L, context(L).api->job_status(name));
    return 1;
  });
}

int rw_job_stop(lua_State* L) {
  return protect(L, [&] {
    auto name = job_name(L, "rw.job_stop");
    push_job(L, context(L).api->job_stop(name));
    return 1;
  });
}

int rw_node_drain(lua_State* L) {
  return protect(L, [&] {
    auto name = arg_string(L, 1, "rw.node_drain", "a node name");
    auto done = context(L).api->node_drain(name);
    lua_pushstring(L, done.c_str());
    return 1;
  });
}

int rw_node_join(lua_State* L) {
  return protect(L, [&] {
    auto name = arg_string(L, 1, "rw.node_join", "a node name");
    auto done = context(L).api->node_join(name);
    lua_pushstring(L, done.c_str());
    return 1;
  });
}

int rw_job_delete(lua_State* L) {
  return protect(L, [&] {
    auto name = job_name(L, "rw.job_delete");
    context(L).api->job_delete(name);
    lua_pushboolean(L, 1);
    return 1;
  });
}

int rw_checkpoint(lua_State* L) {
  return protect(L, [&] {
    auto name = job_name(L, "rw.checkpoint");
    auto dir = arg_string(L, 2, "rw.checkpoint", "a directory");
    uint64_t clock = 0;
    if (lua_gettop(L) >= 3 && !lua_isnil(L, 3)) {
      if (lua_type(L, 3) != LUA_TTABLE)
        throw std::invalid_argument("rw.checkpoint: the third argument is {clock = N}");
      lua_getfield(L, 3, "clock");
      if (!lua_isnil(L, -1)) {
        int ok = 0;
        auto c = lua_tointegerx(L, -1, &ok);
        if (!ok || c <= 0)
          throw std::invalid_argument(
            "rw.checkpoint: clock must be a positive whole number");
        clock = static_cast<uint64_t>(c);
      }
      lua_pop(L, 1);
    }
    auto info = context(L).api->checkpoint(name, dir, clock);
    lua_createtable(L, 0, 5);
    lua_pushlstring(L, info.job.data(), info.job.size());
    lua_setfield(L, -2, "job");
    lua_pushlstring(L, info.dir.data(), info.dir.size());
    lua_setfield(L, -2, "dir");
    lua_pushinteger(L, static_cast<lua_Integer>(info.clock));
    lua_setfield(L, -2, "clock");
    lua_pushinteger(L, static_cast<lua_Integer>(info.bytes));
    lua_setfield(L, -2, "bytes");
    lua_createtable(L, static_cast<int>(info.files.size()), 0);
    for (size_t i = 0; i < info.files.size(); ++i) {
      lua_pushlstring(L, info.files[i].data(), info.files[i].size());
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
    lua_setfield(L, -2, "files");
    return 1;
  });
}

int rw_coordinator(lua_State* L) {
  return protect(L, [&] {
    auto address = context(L).api->coordinator();
    lua_pushlstring(L, address.data(), address.size());
    return 1;
  });
}

int rw_show(lua_State* L) {
  return protect(L, [&] {
    auto text = format_value(L, 1) + "\n";
    std::fputs(text.c_str(), context(L).opts.out);
    return 0;
  });
}

int rw_help(lua_State* L) {
  return protect(L, [&] {
    std::string text = "The rw module (errors are Lua errors; pcall catches them):\n";
    for (auto& c : commands)
      text += fmt::format("  {}\n      {}\n", c.usage, c.help);
    std::fputs(text.c_str(), context(L).opts.out);
    return 0;
  });
}

} // namespace detail

void install_rw(lua_State* L, cluster_api& api, rw_options opts) {
  lua_newtable(L); // rw
  auto* ctx = static_cast<detail::rw_context*>(
    lua_newuserdatauv(L, sizeof(detail::rw_context), 0));
  new (ctx) detail::rw_context{&api, opts}; // trivially destructible: no __gc needed
  for (auto& c : detail::commands) {
    lua_pushvalue(L, -1); // the context, as upvalue 1
    lua_pushcclosure(L, c.fn, 1);
    lua_setfield(L, -3, c.name);
  }
  lua_pop(L, 1);            // the context
  lua_createtable(L, 0, 1); // metatable: unknown names are errors
  lua_pushcfunction(L, detail::unknown_command);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "rw"); // package.loaded.rw, for require "rw"
  lua_pop(L, 1);
  lua_setglobal(L, "rw");
}

} // namespace rw::shell
