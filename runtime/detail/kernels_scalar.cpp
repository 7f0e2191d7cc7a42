// The kernel bodies compiled for scalar (see kernels_impl.inc and CMakeLists.txt for
// the flags this file gets).
#include <cmath>
#include <cstring>

#include "runtime/kernels.hpp"

namespace rw::runtime::detail {

namespace {
#include "runtime/detail/kernels_impl.inc"
} // namespace

kernel_table scalar_kernels() noexcept {
  return {"scalar", impl_sum_into, impl_add, impl_step, impl_stream};
}

} // namespace rw::runtime::detail
