#pragma once
// The file system side of checkpoints: a directory that may take one, files written
// durably under their final name (a temporary name, fsync, rename, fsync of the
// directory: a reader sees the whole file or none), and whole files read back.
// Failures throw checkpoint_error naming the path and the system's reason.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace rw::runtime::checkpoint {

class checkpoint_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Makes `dir` ready for a new checkpoint: creates it (and its parents) if absent;
/// refuses one that exists and is not an empty directory, or that cannot be written.
void prepare_dir(const std::string& dir);

/// Writes `bytes` to dir/name durably and atomically.
void write_atomic(const std::string& dir, const std::string& name,
                  const std::vector<uint8_t>& bytes);

/// The whole content of dir/name.
std::vector<uint8_t> read_all(const std::string& dir, const std::string& name);

/// xxh64 (seed 0) of `bytes`.
uint64_t checksum(const std::vector<uint8_t>& bytes);

} // namespace rw::runtime::checkpoint
