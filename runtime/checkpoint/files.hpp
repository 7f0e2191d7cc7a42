#pragma once
// The file system side of checkpoints: a directory that may take one, files written
// durably under their final name (a temporary name, fsync, rename, fsync of the
// directory: a reader sees the whole file or none), and whole files read back.
// Failures throw checkpoint_error naming the path and the system's reason.
//
// Whoever can write a checkpoint directory must not be able to turn the node's writes
// or reads elsewhere: directories are created 0700 and a symbolic link in their place
// is refused; files are created 0600 with O_EXCL|O_NOFOLLOW (a link planted at the
// temporary name is refused, never followed); files are read with O_NOFOLLOW, and only
// up to the size the caller expects (fstat first).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace rw::runtime::checkpoint {

class checkpoint_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// No manifest is larger: 2^24 chunks (validate()'s bound) at 8 bytes of id each, and
/// the spec, fit in 256 MiB.
constexpr uint64_t max_manifest_bytes = uint64_t{256} << 20;
/// No chunk file is read past this, whatever its manifest says.
constexpr uint64_t max_chunk_file_bytes = uint64_t{64} << 30;

/// Makes `dir` ready for a new checkpoint: creates it (and its missing parents, 0700) if
/// absent; refuses a symbolic link, a non-directory, a directory that is not empty (it
/// holds another run's checkpoint or other files) and one that cannot be written.
void prepare_dir(const std::string& dir);

/// Makes `dir` ready for one node's part of a periodic checkpoint (dir/clock-N, which
/// every node of the job writes into): creates it 0700 if absent; an existing one must
/// be a directory (not a link) that holds no MANIFEST (a complete checkpoint is never
/// written over).
void prepare_part_dir(const std::string& dir);

/// Writes `bytes` to dir/name durably and atomically: through dir/name.tmp, created
/// O_EXCL|O_NOFOLLOW with mode 0600. A stale name.tmp (a writer that crashed) is removed
/// first if it is a regular file of this user; anything else there is refused.
void write_atomic(const std::string& dir, const std::string& name,
                  const std::vector<uint8_t>& bytes);

/// The whole content of dir/name, opened with O_NOFOLLOW; refused if it is not a
/// regular file or holds more than `max_bytes`.
std::vector<uint8_t> read_all(const std::string& dir, const std::string& name,
                              uint64_t max_bytes);

/// xxh64 (seed 0) of `bytes`.
uint64_t checksum(const std::vector<uint8_t>& bytes);

} // namespace rw::runtime::checkpoint
