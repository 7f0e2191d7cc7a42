#pragma once
// What every fuzz target does when a property it checks does not hold: say which, and
// abort, so libFuzzer records the input as a crash (a decoder that merely refuses an
// input is not a finding; one that accepts it and then misbehaves is).

#include <cstdio>
#include <cstdlib>
#include <string>

namespace rw::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

} // namespace rw::fuzz
