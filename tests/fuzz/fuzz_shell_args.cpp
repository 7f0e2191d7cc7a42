// The Lua argument readers of rw-shell (apps/shell/detail): the input is a Lua
// expression, evaluated in a state with no libraries, a memory cap and an instruction
// budget; its value goes to rw.job_create's reader and to the option readers of rw.wait
// and rw.watch, through `protect` as the shell calls them. They accept it or raise a Lua
// error with a message; anything else (a crash, a C++ exception through Lua, a sanitizer
// report) is a finding.

#include <cstdint>
#include <cstdlib>
#include <string>

#include <lua.hpp>

#include "apps/shell/detail/job_args.hpp"
#include "apps/shell/detail/lua_guard.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace sd = rw::shell::detail;

namespace {

constexpr size_t memory_cap = 16u << 20;

// The cap holds while the input's expression runs; the readers run uncapped, as in the
// shell (Lua running out of memory is the one error that may raise inside them).
struct budget {
  size_t used = 0;
  bool capped = true;
};

void* bounded_alloc(void* ud, void* ptr, size_t old_size, size_t new_size) {
  auto* b = static_cast<budget*>(ud);
  if (ptr == nullptr)
    old_size = 0;
  if (new_size == 0) {
    std::free(ptr);
    b->used -= old_size;
    return nullptr;
  }
  if (b->capped && new_size > old_size && b->used + (new_size - old_size) > memory_cap)
    return nullptr; // Lua raises "not enough memory"
  void* p = std::realloc(ptr, new_size);
  if (p != nullptr)
    b->used = b->used - old_size + new_size;
  return p;
}

void out_of_steps(lua_State* L, lua_Debug*) {
  luaL_error(L, "instruction budget spent");
}

int read_create(lua_State* L) {
  return sd::protect(L, [&] {
    (void)sd::read_create_request(L, 1);
    return 0;
  });
}

int read_options(lua_State* L) {
  return sd::protect(L, [&] {
    sd::check_options(L, 1, "rw.wait", {"interval", "timeout"});
    (void)sd::option_number(L, 1, "rw.wait", "interval", 0.2, true);
    (void)sd::option_number(L, 1, "rw.wait", "timeout", 600, false);
    return 0;
  });
}

int read_strings(lua_State* L) {
  return sd::protect(L, [&] {
    (void)sd::describe_value(L, 1);
    (void)sd::arg_string(L, 1, "rw.job_status", "a job's name");
    (void)sd::arg_number(L, 1, "rw.sleep", "a number of seconds");
    return 0;
  });
}

// Calls `reader` with the value on top of the stack; it succeeds or raises a message.
void call(lua_State* L, lua_CFunction reader) {
  lua_pushcfunction(L, reader);
  lua_pushvalue(L, -2);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    if (lua_type(L, -1) != LUA_TSTRING)
      rw::fuzz::fail("an argument reader raised an error that is not a message");
    lua_pop(L, 1);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  budget b;
  lua_State* L = lua_newstate(bounded_alloc, &b);
  if (L == nullptr)
    return 0;
  lua_sethook(L, out_of_steps, LUA_MASKCOUNT, 100000);
  std::string chunk = "return " + std::string(reinterpret_cast<const char*>(data), size);
  if (luaL_loadbufferx(L, chunk.data(), chunk.size(), "=fuzz", "t") == LUA_OK
      && lua_pcall(L, 0, 1, 0) == LUA_OK) {
    b.capped = false;
    for (auto reader : {read_create, read_options, read_strings})
      call(L, reader);
  }
  lua_close(L);
  return 0;
}
