#pragma once
// Memory a transport will send from, registered with it ahead of time: a node's shards
// hand each new job's parameter arena to it when the job is created, so no chunk's
// first answer pays for a registration. The handle keeps the registration; dropping it
// (the job ends) lets the transport forget it before the memory is freed.

#include <cstddef>
#include <functional>
#include <memory>

namespace rw::runtime {

/// Registers [data, data + bytes) until the returned handle is dropped. May throw
/// (the transport refused: the message says why); an empty function registers nothing.
using memory_registrar =
  std::function<std::shared_ptr<void>(const void* data, size_t bytes)>;

} // namespace rw::runtime
