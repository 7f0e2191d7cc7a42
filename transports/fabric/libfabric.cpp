// libfabric loaded on first use (transports/fabric/libfabric.hpp).

#include "transports/fabric/libfabric.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include <fmt/format.h>

#include "rackweave/errc.hpp"
#include "transports/fabric/kept_signals.hpp"

namespace rw::transports::fabric::lib {

namespace {

// The soname Debian's libfabric1 (and every distribution's libfabric 1.x) installs.
constexpr const char* soname = "libfabric.so.1";

struct api {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*,
                 fi_info**) = nullptr;
  void (*freeinfo)(fi_info*) = nullptr;
  fi_info* (*dupinfo)(const fi_info*) = nullptr;
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
  const char* (*strerror)(int) = nullptr;
  std::string failed; // why it could not be loaded ("" once loaded)
};

// Resolves `name` at `version` (the one the headers' fi_info layout belongs to: what a
// link against libfabric would have bound) into `fn`; notes a miss in `a.failed`.
template <class Fn>
void bind(api& a, void* handle, Fn& fn, const char* name, const char* version) {
  fn = reinterpret_cast<Fn>(dlvsym(handle, name, version));
  if (fn == nullptr && a.failed.empty()) {
    const char* why = dlerror();
    a.failed = fmt::format("{} has no {}@{}: {}", soname, name, version,
                           why ? why : "symbol not found");
  }
}

api& loaded() {
  static api a;
  static std::once_flag once;
  std::call_once(once, [] {
    // RTLD_LOCAL: its symbols (and its providers') stay out of the global scope. The
    // providers' libraries load with it; their constructors' signal handlers go.
    kept_signals keep;
    void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      a.failed = fmt::format("{} cannot be loaded ({}): install libfabric (Debian: "
                             "apt-get install libfabric1)",
                             soname, why ? why : "not found");
      return;
    }
    bind(a, handle, a.getinfo, "fi_getinfo", "FABRIC_1.3");
    bind(a, handle, a.freeinfo, "fi_freeinfo", "FABRIC_1.3");
    bind(a, handle, a.dupinfo, "fi_dupinfo", "FABRIC_1.3");
    bind(a, handle, a.fabric, "fi_fabric", "FABRIC_1.1");
    bind(a, handle, a.strerror, "fi_strerror", "FABRIC_1.0");
    // The handle stays open for the process's life: domains and their providers'
    // threads outlive any one caller.
  });
  return a;
}

const api& ready() {
  auto& a = loaded();
  if (!a.failed.empty())
    throw rw::error(errc::unavailable, "fabric: " + a.failed);
  return a;
}

} // namespace

void load() {
  ready();
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  auto& a = ready();
  kept_signals keep; // the first call initialises every provider
  return a.getinfo(version, node, service, flags, hints, info);
}

void freeinfo(fi_info* info) {
  ready().freeinfo(info);
}

fi_info* dupinfo(const fi_info* info) {
  return ready().dupinfo(info);
}

int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  auto& a = ready();
  kept_signals keep;
  return a.fabric(attr, fabric, context);
}

const char* strerror(int errnum) {
  auto& a = loaded();
  return a.strerror ? a.strerror(errnum) : "(libfabric not loaded)";
}

} // namespace rw::transports::fabric::lib
