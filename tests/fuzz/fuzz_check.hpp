#pragma once
// What every fuzz target does when a property it checks does not hold: say which, and
// abort, so libFuzzer records the input as a crash (a decoder that merely refuses an
// input is not a finding; one that accepts it and then misbehaves is).

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rw::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

/// The input as a file (an anonymous memfd, at `path`) for loaders that read one;
/// closed when it goes.
struct input_file {
  int fd;
  std::string path;
  input_file(const uint8_t* data, size_t size)
    : fd(memfd_create("rw-fuzz", MFD_CLOEXEC)) {
    if (fd < 0)
      fail("memfd_create failed");
    for (size_t done = 0; done < size;) {
      auto n = write(fd, data + done, size - done);
      if (n <= 0)
        fail("write to the memfd failed");
      done += size_t(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~input_file() { close(fd); }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
};

} // namespace rw::fuzz
