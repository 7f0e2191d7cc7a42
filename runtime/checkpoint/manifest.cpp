#include "runtime/checkpoint/manifest.hpp"

#include <algorithm>
#include <map>

#include "runtime/checkpoint/detail/capnp_bytes.hpp"
#include "runtime/checkpoint/files.hpp"
#include "runtime/chunking.hpp"
#include "runtime/optimizer_fields.hpp"
#include "schemas/checkpoint.capnp.h"

namespace rw::runtime::checkpoint {

std::string chunk_file_name(const std::string& node) {
  return fmt::format("chunks-{}.rwck", node);
}

file_entry write_chunk_file(const std::string& dir, const chunk_file& f) {
  auto bytes = encode(f);
  file_entry e;
  e.name = chunk_file_name(f.node);
  e.bytes = bytes.size();
  e.xxh64 = checksum(bytes);
  for (auto& c : f.chunks)
    e.chunks.emplace_back(c.tensor, c.chunk);
  write_atomic(dir, e.name, bytes);
  return e;
}

void write_manifest(const std::string& dir, const manifest& m) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::ckpt::Manifest>();
  root.setFormat(format_version);
  root.setJob(m.spec.name);
  root.setWorkers(m.spec.num_workers);
  root.setChunkBytes(m.spec.chunk_bytes);
  root.setConsistency(to_string(m.spec.consistency));
  root.setCompression(to_string(m.spec.compression));
  root.setCompressUpdates(m.spec.compression.updates);
  auto o = root.initOptimizer();
  auto& s = m.spec.optimizer;
  o.setKind(to_string(s.kind));
  runtime::set_hyper_parameters(o, s);
  auto ts = root.initTensors(static_cast<unsigned>(m.spec.tensors.size()));
  for (unsigned i = 0; i < m.spec.tensors.size(); ++i) {
    ts[i].setName(m.spec.tensors[i].name);
    ts[i].setElements(m.spec.tensors[i].elements);
    ts[i].setHasInit(m.spec.tensors[i].has_init);
  }
  root.setClock(m.clock);
  auto sched = root.initSchedule(static_cast<unsigned>(m.spec.schedule.size()));
  for (unsigned i = 0; i < sched.size(); ++i)
    runtime::set_hyper_change(sched[i], m.spec.schedule[i]);
  auto fs = root.initFiles(static_cast<unsigned>(m.files.size()));
  for (unsigned i = 0; i < m.files.size(); ++i) {
    auto& e = m.files[i];
    fs[i].setName(e.name);
    fs[i].setBytes(e.bytes);
    fs[i].setXxh64(e.xxh64);
    auto ids = fs[i].initChunks(static_cast<unsigned>(e.chunks.size()));
    for (unsigned k = 0; k < e.chunks.size(); ++k) {
      ids[k].setTensor(e.chunks[k].first);
      ids[k].setChunk(e.chunks[k].second);
    }
  }
  write_atomic(dir, manifest_name, detail::to_bytes(msg));
}

namespace {

// Every chunk of every tensor is in exactly one file, and every id a file names is one
// of the job's: the indexes are bounded here, before anything (a routing table) indexes
// with them.
void check_coverage(const std::string& dir, const manifest& m) {
  std::vector<uint32_t> counts;
  for (auto& t : m.spec.tensors)
    counts.push_back(chunk_layout{t.elements, m.spec.chunk_bytes}.count());
  std::map<std::pair<uint32_t, uint32_t>, const std::string*> seen;
  for (auto& e : m.files)
    for (auto& id : e.chunks) {
      if (id.first >= m.spec.tensors.size())
        throw checkpoint_error(
          fmt::format("checkpoint '{}': file {} names tensor #{}, the "
                      "job has {} tensors",
                      dir, e.name, id.first, m.spec.tensors.size()));
      if (id.second >= counts[id.first])
        throw checkpoint_error(fmt::format("checkpoint '{}': file {} names chunk {}/{}, "
                                           "tensor '{}' has {} chunks",
                                           dir, e.name, id.first, id.second,
                                           m.spec.tensors[id.first].name,
                                           counts[id.first]));
      auto [it, fresh] = seen.emplace(id, &e.name);
      if (!fresh)
        throw checkpoint_error(
          fmt::format("checkpoint '{}': chunk {}/{} is in both {} and {}", dir, id.first,
                      id.second, *it->second, e.name));
    }
  for (uint32_t t = 0; t < m.spec.tensors.size(); ++t)
    for (uint32_t c = 0; c < counts[t]; ++c)
      if (seen.count({t, c}) == 0)
        throw checkpoint_error(fmt::format("checkpoint '{}': no file holds chunk {}/{} "
                                           "(tensor '{}')",
                                           dir, t, c, m.spec.tensors[t].name));
}

// The most bytes a chunk file holding `e`'s chunks can take: each chunk's parameters and
// up to two optimizer arrays, with Cap'n Proto's framing, pointers and padding.
uint64_t chunk_file_bound(const manifest& m, const file_entry& e) {
  uint64_t bound = 4096 + 64 * uint64_t{m.spec.name.size()};
  for (auto& [t, c] : e.chunks) {
    auto floats = chunk_layout{m.spec.tensors[t].elements, m.spec.chunk_bytes}.length(c);
    bound += 3 * ((uint64_t{floats} * sizeof(float) + 7) / 8 * 8) + 128;
  }
  return std::min(bound, max_chunk_file_bytes);
}

} // namespace

manifest read_manifest(const std::string& dir) {
  auto what = fmt::format("manifest of '{}'", dir);
  auto m = detail::read_message(
    read_all(dir, manifest_name, max_manifest_bytes), what,
    [&](capnp::MessageReader& reader) {
      auto root = reader.getRoot<schema::ckpt::Manifest>();
      if (root.getFormat() != format_version)
        throw checkpoint_error(
          fmt::format("checkpoint: {} has format {}, this build reads {}", what,
                      root.getFormat(), format_version));
      manifest m;
      m.spec.name = root.getJob();
      m.spec.num_workers = root.getWorkers();
      m.spec.chunk_bytes = root.getChunkBytes();
      try {
        m.spec.consistency = parse_consistency(root.getConsistency().cStr());
        if (root.hasCompression() && root.getCompression().size() > 0)
          m.spec.compression = parse_compression(root.getCompression().cStr());
        m.spec.compression.updates = root.getCompressUpdates();
      } catch (const std::exception& e) {
        throw checkpoint_error(fmt::format("checkpoint: {}: {}", what, e.what()));
      }
      auto o = root.getOptimizer();
      auto kind = parse_optimizer_kind(o.getKind().cStr());
      if (!kind)
        throw checkpoint_error(fmt::format(
          "checkpoint: {} names an unknown optimizer '{}'", what, o.getKind().cStr()));
      auto& s = m.spec.optimizer;
      s.kind = *kind;
      runtime::get_hyper_parameters(o, s);
      for (auto t : root.getTensors())
        m.spec.tensors.push_back({t.getName(), t.getElements(), t.getHasInit()});
      m.clock = root.getClock();
      for (auto c : root.getSchedule()) {
        hyper_change h;
        auto why = runtime::get_hyper_change(c, h) ? validate(h) : "unknown fields";
        if (!why.empty())
          throw checkpoint_error(fmt::format("checkpoint: {} holds a bad hyper-parameter "
                                             "change: {}",
                                             what, why));
        m.spec.schedule.push_back(h);
      }
      for (auto f : root.getFiles()) {
        file_entry e{f.getName(), f.getBytes(), f.getXxh64(), {}};
        if (e.name.empty() || e.name.find('/') != std::string::npos)
          throw checkpoint_error(
            fmt::format("checkpoint: {} names a bad file '{}'", what, e.name));
        for (auto id : f.getChunks())
          e.chunks.emplace_back(id.getTensor(), id.getChunk());
        m.files.push_back(std::move(e));
      }
      return m;
    });
  if (m.spec.chunk_bytes == 0 || m.spec.chunk_bytes % sizeof(float) != 0)
    throw checkpoint_error(
      fmt::format("checkpoint: {} has chunk size {}", what, m.spec.chunk_bytes));
  // Tensor sizes and the chunk count bounded as for any job (the coverage check below
  // walks every chunk).
  if (auto why = validate(m.spec, UINT32_MAX - 3, UINT32_MAX); !why.empty())
    throw checkpoint_error(
      fmt::format("checkpoint: {} holds a job spec no job could have: {}", what, why));
  check_coverage(dir, m);
  return m;
}

chunk_file read_chunk_file(const std::string& dir, const manifest& m,
                           const file_entry& e) {
  auto bound = chunk_file_bound(m, e);
  if (e.bytes > bound)
    throw checkpoint_error(
      fmt::format("checkpoint '{}': the manifest says {} is {} bytes; its "
                  "{} chunks take at most {}: refused unread",
                  dir, e.name, e.bytes, e.chunks.size(), bound));
  auto bytes = read_all(dir, e.name, e.bytes);
  if (bytes.size() != e.bytes)
    throw checkpoint_error(
      fmt::format("checkpoint '{}': {} is {} bytes, the manifest says {}", dir, e.name,
                  bytes.size(), e.bytes));
  auto sum = checksum(bytes);
  if (sum != e.xxh64)
    throw checkpoint_error(
      fmt::format("checkpoint '{}': {} has checksum {:016x}, the manifest "
                  "says {:016x}: the file is damaged",
                  dir, e.name, sum, e.xxh64));
  auto f = decode_chunk_file(bytes, fmt::format("'{}/{}'", dir, e.name));
  if (f.clock != m.clock)
    throw checkpoint_error(
      fmt::format("checkpoint '{}': {} is at clock {}, the manifest at {}", dir, e.name,
                  f.clock, m.clock));
  // Exactly the chunks the manifest lists for it (bounded by read_manifest), each of
  // its chunk's length.
  std::map<std::pair<uint32_t, uint32_t>, bool> listed;
  for (auto& id : e.chunks)
    listed.emplace(id, false);
  for (auto& c : f.chunks) {
    auto it = listed.find({c.tensor, c.chunk});
    if (it == listed.end() || it->second)
      throw checkpoint_error(fmt::format(
        "checkpoint '{}': {} holds chunk {}/{} {}", dir, e.name, c.tensor, c.chunk,
        it == listed.end() ? "which the manifest does not list "
                             "for it"
                           : "twice"));
    it->second = true;
    if (c.version != m.clock)
      throw checkpoint_error(
        fmt::format("checkpoint '{}': chunk {}/{} in {} is at version {}, "
                    "the checkpoint at clock {}",
                    dir, c.tensor, c.chunk, e.name, c.version, m.clock));
    auto len = chunk_layout{m.spec.tensors[c.tensor].elements, m.spec.chunk_bytes}.length(
      c.chunk);
    auto fits = [&](const std::vector<float>& xs, bool may_be_empty) {
      return xs.size() == len || (may_be_empty && xs.empty());
    };
    if (!fits(c.params, false) || !fits(c.m, true) || !fits(c.v, true))
      throw checkpoint_error(fmt::format(
        "checkpoint '{}': chunk {}/{} in {} has {}/{}/{} "
        "floats (parameters/m/v), the chunk {}",
        dir, c.tensor, c.chunk, e.name, c.params.size(), c.m.size(), c.v.size(), len));
  }
  if (f.chunks.size() != listed.size())
    throw checkpoint_error(
      fmt::format("checkpoint '{}': {} holds {} chunks, the manifest "
                  "lists {}",
                  dir, e.name, f.chunks.size(), listed.size()));
  return f;
}

std::string restore_mismatch(const manifest& m, const job_spec& wanted) {
  if (m.spec.chunk_bytes != wanted.chunk_bytes)
    return fmt::format("the checkpoint has {}-byte chunks, the new job {}",
                       m.spec.chunk_bytes, wanted.chunk_bytes);
  if (m.spec.optimizer.kind != wanted.optimizer.kind)
    return fmt::format("the checkpoint's optimizer is {}, the new job's {}",
                       to_string(m.spec.optimizer.kind),
                       to_string(wanted.optimizer.kind));
  if (m.spec.tensors.size() != wanted.tensors.size())
    return fmt::format("the checkpoint has {} tensors, the new job {}",
                       m.spec.tensors.size(), wanted.tensors.size());
  for (size_t i = 0; i < wanted.tensors.size(); ++i) {
    auto& a = m.spec.tensors[i];
    auto& b = wanted.tensors[i];
    if (a.name != b.name || a.elements != b.elements)
      return fmt::format(
        "tensor #{} is '{}' with {} elements in the checkpoint, '{}' with {} "
        "in the new job",
        i, a.name, a.elements, b.name, b.elements);
  }
  return {};
}

} // namespace rw::runtime::checkpoint
