#pragma once
// libfabric, loaded the first time the fabric transport needs it (dlopen of
// libfabric.so.1), not when a process starts. Linked in, it brought every provider's
// libraries into every RackWeave process, node, worker, shell and `import rackweave`
// alike, whether it used the fabric transport or not; one of them (libinfinipath, under
// the psm provider) calibrates its clock in a constructor: about 0.2 s of 125 us sleeps
// with the main thread pinned to CPU 0 at every start, and a SIGSEGV handler of its own
// that writes a backtrace file into the working directory. Now only a process that opens
// a fabric domain (transports/fabric/domain.hpp) loads them.
//
// The five functions libfabric exports that RackWeave calls (the rest of its API is
// inline, through the objects these return), at the symbol versions of the headers it
// was compiled with.

#include <rdma/fabric.h>

#include <cstdint>

namespace rw::transports::fabric::lib {

/// Loads libfabric once per process; throws rw::error(errc::unavailable) saying why
/// (the library is not installed, or lacks a symbol) on every call when it cannot.
void load();

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);
void freeinfo(fi_info* info);
/// A copy of `info`; of an empty fi_info (with its attribute structs) when null.
fi_info* dupinfo(const fi_info* info);
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
/// libfabric's text for an error number; "(libfabric not loaded)" before load().
const char* strerror(int errnum);

} // namespace rw::transports::fabric::lib
