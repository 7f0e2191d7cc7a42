#pragma once
// Ctrl-C in the interactive shell. While an interrupt_scope lives, SIGINT does not
// kill the process: the handler only sets a flag, which long-running loops (rw.wait,
// rw.watch, rw.sleep, the prompt) check with interrupt_pending / take_interrupt.
// When the scope names a lua_State, the handler also sets a one-shot hook on it that
// raises the Lua error "interrupted" at the next Lua call or instruction, so plain Lua
// loops can be stopped too (what lua.c does). Scopes nest; each restores the handler
// and hook target it found. The handler is installed without SA_RESTART, so a
// blocking poll() or sleep returns early with EINTR.
//
// Without a scope (script mode) SIGINT keeps its default action.

#include <signal.h> // struct sigaction

struct lua_State;

namespace rw::shell {

class interrupt_scope {
public:
  explicit interrupt_scope(lua_State* hook_target = nullptr);
  ~interrupt_scope();
  interrupt_scope(const interrupt_scope&) = delete;
  interrupt_scope& operator=(const interrupt_scope&) = delete;

private:
  struct sigaction old_action_ {};
  lua_State* old_target_ = nullptr;
};

/// A SIGINT arrived and was not taken yet.
bool interrupt_pending() noexcept;

/// Returns interrupt_pending() and clears the flag.
bool take_interrupt() noexcept;

/// Sleeps `seconds` in short slices; returns false as soon as an interrupt is pending
/// (at once when one already is), true when the time has passed.
bool pause_for(double seconds) noexcept;

/// Removes a pending interrupt hook from `L` (after the chunk it was meant for ended).
void clear_interrupt_hook(lua_State* L) noexcept;

} // namespace rw::shell
