#pragma once
// A checkpoint's manifest (schemas/checkpoint.capnp Manifest): the job's spec, the
// clock every chunk is at, and which file holds which chunks with each file's size and
// xxh64. Written last, atomically: a directory without one is not a checkpoint.
// Reading a chunk file through the manifest checks its size and checksum first.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rackweave/job_spec.hpp"
#include "runtime/checkpoint/chunk_file.hpp"

namespace rw::runtime::checkpoint {

inline const std::string manifest_name = "MANIFEST";
constexpr uint32_t format_version = 1;

struct file_entry {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
  std::vector<std::pair<uint32_t, uint32_t>> chunks; // (tensor, chunk)
};

struct manifest {
  job_spec spec;
  uint64_t clock = 0;
  std::vector<file_entry> files;
};

/// The name a node's chunk file gets.
std::string chunk_file_name(const std::string& node);

/// Encodes `f`, writes it durably into `dir` and returns its manifest entry.
file_entry write_chunk_file(const std::string& dir, const chunk_file& f);

/// Writes the manifest durably (last: it makes the directory a checkpoint).
void write_manifest(const std::string& dir, const manifest& m);

/// Reads and checks the manifest of `dir`: present, decodes, format known, every chunk
/// of every tensor held by exactly one file. Throws checkpoint_error saying what is wrong.
manifest read_manifest(const std::string& dir);

/// Reads one chunk file named by the manifest, refusing it if its size or checksum
/// differ from the manifest's, or it is at another clock.
chunk_file read_chunk_file(const std::string& dir, const manifest& m,
                           const file_entry& e);

/// Empty when a job created as `wanted` can start from `m`, else the first difference.
/// Tensors, chunk size and optimizer kind must match: the chunks and their optimizer
/// state are laid out by them. Workers, learning rate and the other hyper-parameters
/// may change.
std::string restore_mismatch(const manifest& m, const job_spec& wanted);

} // namespace rw::runtime::checkpoint
