#pragma once
// The frame header every transport carries, and its codec.
//
// On the wire a header is the Cap'n Proto message schemas/frame.capnp:FrameHeader,
// unpacked, single segment: 8 bytes of segment table, 8 of root pointer and 48 of data.
// Every field is fixed-width, so every header is exactly `frame_header_bytes` long and
// a receiver always knows how much to read before the payload.

#include <cstddef>
#include <cstdint>
#include <string>

#include "rackweave/errc.hpp"

namespace rw::protocol {

enum class frame_kind : uint16_t {
  invalid = 0,
  hello = 1,
  welcome = 2,
  push = 3,
  pull = 4,
  update = 5,
  ack = 6,
  init = 7,
  error = 8,
  bye = 9,
  attach = 10,
  push_sparse = 11,
  challenge = 12, // node -> worker: prove you hold the job's token (payload: nonce)
  proof = 13,     // worker -> node: the answer (payload: HMAC over the nonce)
  locate = 14,    // anyone -> node: where is the cluster coordinator?
  located = 15,   // node -> asker: the coordinator's control address (payload: Located)
  probe = 16,     // node -> node: rate probe bytes, discarded (flag_want_result: answer
                  // with an ack whose clock is the probe bytes taken on the connection)
  resend = 17,  // node -> worker: shard chunk_index restarted: re-send what is unanswered
                // for the chunks it serves (UINT32_MAX: for every chunk on this link)
  reroute = 18, // node -> worker: the job's nodes changed (payload: Reroute); route by
                // the new ring, re-send what is unanswered for chunks homed on the sender
  hyper = 19,   // worker (rank 0) -> node: change the job's hyper-parameters from a clock
                // on (payload: HyperChange); node -> worker: the answer (clock: the
                // clock the job had reached; refused: error_code, payload ErrorInfo)
  fabric = 20,  // worker -> node (joined TCP connection), and the answer: payload
                // FabricOffer; the worker's chunks then travel over libfabric
  place = 21,   // worker -> node, fabric only: where a tensor's results go (payload:
                // FabricPlace); consumed by the fabric transport
  state = 22,   // worker -> node: read one optimizer array of a chunk (the answer: a
                // `state` frame, `clock` = the chunk's version, payload the array), or,
                // with flag_state_load (rank 0), load one; node -> worker: the answer
                // (a refusal: an `error` frame about the request). `staleness` names
                // the array (state_version_only: none, only the version / the clock)
};

const char* to_string(frame_kind kind) noexcept;

/// Flag bit: this push wants the updated chunk back (push_pull).
constexpr uint16_t flag_want_result = 1;
/// Flag bit: this pull wants the chunk only if its version is newer than `clock`; an
/// unchanged chunk is answered with an ack carrying the same flag.
constexpr uint16_t flag_only_changed = 2;

/// Flag bit: this pull subscribes to the chunk; updates it causes carry the same flag.
constexpr uint16_t flag_subscribe = 4;

/// Flag bit on an `ack`: from the chunk's replica (replicas = 1), which counted the init
/// of a worker (a worker's init completes once the home and the replica have it), or,
/// on a mirror link, took the home's summed gradient of step `clock`.
constexpr uint16_t flag_replica = 8;

/// Flag bit of the fabric transport only, on an `update` whose header is in a slot: its
/// payload was written straight into the output buffer the receiver named (frame kind
/// `place`). The receiving endpoint clears it before a sink sees the frame.
constexpr uint16_t flag_placed = 16;

/// Flag bits of a push (worker -> node) or an update (node -> worker) of a job created
/// with compression bf16 or fp16: the payload holds the chunk as 16-bit values in that
/// format (protocol/half.hpp), not float32. At most one of them is set.
constexpr uint16_t flag_bf16 = 32;
constexpr uint16_t flag_fp16 = 64;
constexpr uint16_t flag_half = flag_bf16 | flag_fp16;

/// Flag bit of a `state` frame from a worker: load (rank 0) the array `staleness` of the
/// chunk from the payload, or with state_version_only and no payload set its version to
/// `clock`; without it the frame reads.
constexpr uint16_t flag_state_load = 128;

/// A `state` frame's `staleness` naming no optimizer array: a read answers with the
/// chunk's version alone, a load sets the version (`clock`).
constexpr uint32_t state_version_only = 0xFFFFFFFFu;

/// The rank a mirror link (a chunk's home node sending each step's sum to the chunk's
/// replica node; Hello.mirror) says hello as and stamps its frames with.
constexpr uint32_t mirror_rank = 0xFFFFFFFEu;

/// One entry of a push_sparse payload.
struct sparse_pair {
  uint32_t index; // within the chunk
  float value;
};
static_assert(sizeof(sparse_pair) == 8);

struct frame_header {
  frame_kind kind = frame_kind::invalid;
  uint16_t flags = 0;
  errc error_code = errc::ok;
  uint32_t job_id = 0;
  uint32_t rank = 0;
  uint32_t tensor_id = 0;
  uint32_t chunk_index = 0;
  uint32_t payload_bytes = 0;
  uint64_t clock = 0;
  uint32_t staleness = 0;
  uint32_t ring = 0; // push, init: the ring version routed by (0: not stamped)
};

constexpr size_t frame_header_bytes = 64;

/// Writes the header into `out` (frame_header_bytes, 8-byte aligned).
void encode(const frame_header& h, std::byte* out);

/// Whether the 64 bytes at `in` begin as a CAF 0.17 middleman's handshake: a peer that
/// answers like that is a control port, not a node's data endpoint (decode says so).
bool looks_like_caf_handshake(const std::byte* in);

/// Decodes `in` (frame_header_bytes, 8-byte aligned). On failure returns the error
/// code and sets `why`; the stream can no longer be trusted after that.
errc decode(const std::byte* in, frame_header& out, std::string& why);

} // namespace rw::protocol
