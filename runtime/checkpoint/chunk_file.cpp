#include "runtime/checkpoint/chunk_file.hpp"

#include "runtime/checkpoint/detail/capnp_bytes.hpp"
#include "schemas/checkpoint.capnp.h"

namespace rw::runtime::checkpoint {

namespace {

void put(capnp::Data::Builder out, const std::vector<float>& xs) {
  if (!xs.empty())
    std::memcpy(out.begin(), xs.data(), xs.size() * sizeof(float));
}

std::vector<float> take(capnp::Data::Reader in, const std::string& what) {
  if (in.size() % sizeof(float) != 0)
    throw checkpoint_error(fmt::format("checkpoint: {} holds an array of {} bytes, not "
                                       "whole float32s",
                                       what, in.size()));
  std::vector<float> xs(in.size() / sizeof(float));
  if (!xs.empty())
    std::memcpy(xs.data(), in.begin(), in.size());
  return xs;
}

} // namespace

std::vector<uint8_t> encode(const chunk_file& f) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::ckpt::ChunkFile>();
  root.setJob(f.job);
  root.setClock(f.clock);
  root.setNode(f.node);
  auto list = root.initChunks(static_cast<unsigned>(f.chunks.size()));
  for (unsigned i = 0; i < f.chunks.size(); ++i) {
    auto& c = f.chunks[i];
    auto r = list[i];
    r.setTensor(c.tensor);
    r.setChunk(c.chunk);
    r.setVersion(c.version);
    put(r.initParams(c.params.size() * sizeof(float)), c.params);
    put(r.initM(c.m.size() * sizeof(float)), c.m);
    put(r.initV(c.v.size() * sizeof(float)), c.v);
  }
  return detail::to_bytes(msg);
}

chunk_file decode_chunk_file(const std::vector<uint8_t>& bytes, const std::string& what) {
  return detail::read_message(bytes, what, [&](capnp::MessageReader& reader) {
    auto root = reader.getRoot<schema::ckpt::ChunkFile>();
    chunk_file f;
    f.job = root.getJob();
    f.clock = root.getClock();
    f.node = root.getNode();
    for (auto r : root.getChunks()) {
      chunk_record c;
      c.tensor = r.getTensor();
      c.chunk = r.getChunk();
      c.version = r.getVersion();
      c.params = take(r.getParams(), what);
      c.m = take(r.getM(), what);
      c.v = take(r.getV(), what);
      f.chunks.push_back(std::move(c));
    }
    return f;
  });
}

} // namespace rw::runtime::checkpoint
