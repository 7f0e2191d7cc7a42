#pragma once
// The rw module's C functions, one per command. Each expects the rw_context as its
// first upvalue (install_rw sets that up) and follows lua_guard's rules.

struct lua_State;

namespace rw::shell::detail {

// lua_rw.cpp
int rw_nodes(lua_State* L);
int rw_jobs(lua_State* L);
int rw_job_create(lua_State* L);
int rw_job_status(lua_State* L);
int rw_job_stop(lua_State* L);
int rw_checkpoint(lua_State* L);
int rw_job_delete(lua_State* L);
int rw_node_drain(lua_State* L);
int rw_node_join(lua_State* L);
int rw_coordinator(lua_State* L);
int rw_show(lua_State* L);
int rw_help(lua_State* L);

// wait.cpp
int rw_wait(lua_State* L);
int rw_sleep(lua_State* L);
int rw_time_ms(lua_State* L); // milliseconds since the Unix epoch (the system clock)

// watch.cpp
int rw_watch(lua_State* L);

// inject.cpp
int rw_inject(lua_State* L);

// job_set.cpp
int rw_job_set(lua_State* L);

} // namespace rw::shell::detail
