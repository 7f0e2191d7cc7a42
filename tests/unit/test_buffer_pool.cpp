#include <cstdint>

#include <catch2/catch.hpp>

#include "runtime/buffer_pool.hpp"

using rw::runtime::buffer_pool;
using rw::runtime::buffer_ref;

TEST_CASE("buffers are aligned, reused, and returned on the last release", "[pool]") {
  buffer_pool pool{32768, 2};
  CHECK(pool.allocated() == 2);
  buffer_ref a = pool.acquire();
  buffer_ref b = pool.acquire();
  buffer_ref c = pool.acquire(); // grows
  CHECK(pool.allocated() == 3);
  CHECK(reinterpret_cast<uintptr_t>(a->bytes()) % 64 == 0);
  auto* raw = c.get();
  buffer_ref c2 = c; // a second reference, no copy of the memory
  c.reset();
  CHECK(pool.free_count() == 0);
  c2.reset();
  CHECK(pool.free_count() == 1);
  buffer_ref d = pool.acquire();
  CHECK(d.get() == raw); // reused
  CHECK(pool.allocated() == 3);
}

TEST_CASE("a buffer may outlive its pool", "[pool]") {
  buffer_ref kept;
  {
    buffer_pool pool{64, 1};
    kept = pool.acquire();
    kept->floats()[0] = 1.5f;
  }
  CHECK(kept->floats()[0] == 1.5f);
  kept.reset(); // freed, not returned to the dead pool (ASan/valgrind would flag it)
}

