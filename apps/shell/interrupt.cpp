#include "apps/shell/interrupt.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <lua.hpp>

namespace rw::shell {

namespace {

volatile sig_atomic_t pending = 0;
std::atomic<lua_State*> hook_target{nullptr};

void stop_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  luaL_error(L, "interrupted");
}

extern "C" void on_sigint(int) {
  pending = 1;
  if (auto* L = hook_target.load())
    lua_sethook(L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

} // namespace

interrupt_scope::interrupt_scope(lua_State* target)
  : old_target_(hook_target.exchange(target)) {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0; // no SA_RESTART: blocking calls return with EINTR
  sigaction(SIGINT, &action, &old_action_);
}

interrupt_scope::~interrupt_scope() {
  sigaction(SIGINT, &old_action_, nullptr);
  hook_target.store(old_target_);
}

bool interrupt_pending() noexcept {
  return pending != 0;
}

bool take_interrupt() noexcept {
  bool was = pending != 0;
  pending = 0;
  return was;
}

bool pause_for(double seconds) noexcept {
  using clock = std::chrono::steady_clock;
  auto end = clock::now()
             + std::chrono::duration_cast<clock::duration>(
               std::chrono::duration<double>(std::clamp(seconds, 0.0, 1e9)));
  while (!interrupt_pending()) {
    auto now = clock::now();
    if (now >= end)
      return true;
    std::this_thread::sleep_for(
      std::min<clock::duration>(end - now, std::chrono::milliseconds(50)));
  }
  return false;
}

void clear_interrupt_hook(lua_State* L) noexcept {
  if (lua_gethook(L) == stop_hook) // leave a user's debug.sethook alone
    lua_sethook(L, nullptr, 0, 0);
}

} // namespace rw::shell
