#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/buffer_pool.hpp"

namespace rw_unit_buffer_pool {

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

TEST_CASE("a pool gives its memory back once no buffer is out, down to what it keeps",
          "[pool]") {
  buffer_pool pool{1 << 20, 2}; // 1 MiB buffers: two per 2 MiB slab
  std::vector<buffer_ref> held;
  for (int i = 0; i < 16; ++i)
    held.push_back(pool.acquire());
  CHECK(pool.allocated() == 16);
  // A buffer still out: nothing is freed (its slab holds it).
  held.resize(1);
  CHECK(pool.trim(2) == 0);
  CHECK(pool.allocated() == 16);
  held.clear();
  // All free: the 16 MiB go back, two fresh buffers stay.
  CHECK(pool.trim(2) == 14u << 20);
  CHECK(pool.allocated() == 2);
  CHECK(pool.free_count() == 2);
  // Already small: nothing to do; the pool still serves and grows.
  CHECK(pool.trim(2) == 0);
  auto a = pool.acquire();
  auto b = pool.acquire();
  auto c = pool.acquire();
  CHECK(pool.allocated() == 3);
  a->bytes()[0] = std::byte{1}; // the new memory is usable
  c->bytes()[(1 << 20) - 1] = std::byte{2};
}

} // namespace rw_unit_buffer_pool
