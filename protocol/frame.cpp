#include "protocol/frame.hpp"

#include <cstring>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include "rackweave/defaults.hpp"
#include "schemas/frame.capnp.h"

namespace rw::protocol {

namespace {

constexpr size_t segment_words = (frame_header_bytes - 8) / sizeof(capnp::word);

} // namespace

const char* to_string(frame_kind kind) noexcept {
  switch (kind) {
    case frame_kind::invalid: return "invalid";
    case frame_kind::hello: return "hello";
    case frame_kind::welcome: return "welcome";
    case frame_kind::push: return "push";
    case frame_kind::pull: return "pull";
    case frame_kind::update: return "update";
    case frame_kind::ack: return "ack";
    case frame_kind::init: return "init";
    case frame_kind::error: return "error";
    case frame_kind::bye: return "bye";
    case frame_kind::attach: return "attach";
    case frame_kind::push_sparse: return "push_sparse";
    case frame_kind::challenge: return "challenge";
    case frame_kind::proof: return "proof";
    case frame_kind::locate: return "locate";
    case frame_kind::located: return "located";
    case frame_kind::probe: return "probe";
    case frame_kind::resend: return "resend";
    case frame_kind::reroute: return "reroute";
    case frame_kind::hyper: return "hyper";
    case frame_kind::fabric: return "fabric";
    case frame_kind::place: return "place";
    case frame_kind::state: return "state";
  }
  return "?";
}

void encode(const frame_header& h, std::byte* out) {
  capnp::word scratch[segment_words];
  std::memset(scratch, 0, sizeof(scratch));
  capnp::MallocMessageBuilder msg{kj::arrayPtr(scratch, segment_words),
                                  capnp::AllocationStrategy::FIXED_SIZE};
  auto root = msg.initRoot<schema::FrameHeader>();
  root.setMagic(defaults::frame_magic);
  root.setVersion(defaults::wire_version);
  root.setKind(static_cast<schema::FrameKind>(h.kind));
  root.setFlags(h.flags);
  root.setErrorCode(static_cast<uint16_t>(h.error_code));
  root.setJobId(h.job_id);
  root.setRank(h.rank);
  root.setTensorId(h.tensor_id);
  root.setChunkIndex(h.chunk_index);
  root.setPayloadBytes(h.payload_bytes);
  root.setClock(h.clock);
  root.setStaleness(h.staleness);
  root.setRing(h.ring);
  auto segments = msg.getSegmentsForOutput();
  // One segment of exactly segment_words: the header's layout is fixed by the schema.
  uint32_t table[2] = {0, static_cast<uint32_t>(segment_words)};
  std::memcpy(out, table, sizeof(table));
  std::memcpy(out + sizeof(table), segments[0].begin(),
              segment_words * sizeof(capnp::word));
}

bool looks_like_caf_handshake(const std::byte* in) {
  // CAF 0.17's BASP header, big-endian: operation (0: server_handshake), three bytes of
  // padding and flags (0), payload length, then the protocol version as operation data.
  auto byte = [&](size_t i) { return std::to_integer<uint8_t>(in[i]); };
  for (size_t i = 0; i < 4; ++i)
    if (byte(i) != 0)
      return false;
  uint32_t payload = 0;
  for (size_t i = 4; i < 8; ++i)
    payload = payload << 8 | byte(i);
  uint64_t version = 0;
  for (size_t i = 8; i < 16; ++i)
    version = version << 8 | byte(i);
  return payload > 0 && payload < (1u << 20) && version >= 1 && version <= 16;
}

errc decode(const std::byte* in, frame_header& out, std::string& why) {
  uint32_t table[2];
  std::memcpy(table, in, sizeof(table));
  if (table[0] != 0 || table[1] != segment_words) {
    if (looks_like_caf_handshake(in)) {
      why = "this address is a RackWeave control port (the cluster coordinator's CAF "
            "messages, the address rw.coordinator() gives), not a node's --listen "
            "endpoint: connect workers and rw-shell --connect to a node's --listen "
            "address (a job's endpoints: rw.job_status(name).endpoints)";
      return errc::bad_magic;
    }
    why = fmt::format("frame header has a malformed segment table ({} segments, {} "
                      "words); not a RackWeave peer or a corrupted stream",
                      table[0] + 1, table[1]);
    return errc::bad_magic;
  }
  auto words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(in), segment_words + 1);
  try {
    capnp::FlatArrayMessageReader reader{words};
    auto root = reader.getRoot<schema::FrameHeader>();
    if (root.getMagic() != defaults::frame_magic) {
      why = fmt::format("wrong magic 0x{:08x} (expected 0x{:08x})", root.getMagic(),
                        defaults::frame_magic);
      return errc::bad_magic;
    }
    if (root.getVersion() != defaults::wire_version) {
      why = fmt::format("wire protocol version {} is not spoken here (this node speaks "
                        "{})",
                        root.getVersion(), defaults::wire_version);
      return errc::bad_version;
    }
    auto kind = static_cast<uint16_t>(root.getKind());
    if (kind == 0 || kind > static_cast<uint16_t>(frame_kind::state)) {
      why = fmt::format("unknown frame kind {}", kind);
      return errc::bad_frame;
    }
    out.kind = static_cast<frame_kind>(kind);
    out.flags = root.getFlags();
    out.error_code = static_cast<errc>(root.getErrorCode());
    out.job_id = root.getJobId();
    out.rank = root.getRank();
    out.tensor_id = root.getTensorId();
    out.chunk_index = root.getChunkIndex();
    out.payload_bytes = root.getPayloadBytes();
    out.clock = root.getClock();
    out.staleness = root.getStaleness();
    out.ring = root.getRing();
  } catch (const kj::Exception& e) {
    why = fmt::format("frame header does not decode: {}", e.getDescription().cStr());
    return errc::bad_frame;
  }
  return errc::ok;
}

} // namespace rw::protocol
