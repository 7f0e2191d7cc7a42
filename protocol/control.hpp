#pragma once
// Codecs for the control payloads (schemas/control.capnp) carried by hello, welcome,
// error, challenge, proof and located frames. Decoders take untrusted bytes: they never throw, they bound the
// work Cap'n Proto may do, and they say what is wrong.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"

namespace rw::protocol {

using bytes = std::vector<std::byte>;

struct hello_msg {
  job_spec spec;
  uint32_t rank = 0;
  std::string shm_segment; // empty: TCP only
  uint64_t shm_nonce = 0;
  bool has_token = false; // the worker will prove it holds the job's token
  std::string rack;       // the worker's rack option ("": none)
  std::string picked_by;  // why the worker chose this node ("": it was told to)
  bool mirror = false;    // a home node's mirror link, not a worker (rank = mirror_rank)
  /// The worker states only spec.name (and, for a job without tensors yet,
  /// spec.tensors): the node fills in the rest from the job (schemas/control.capnp).
  bool spec_from_job = false;
};

struct welcome_msg {
  uint32_t job_id = 0;
  std::string node_name;
  bool created = false;
  std::vector<std::string> endpoints;
  uint32_t endpoint_index = 0;
  uint32_t num_shards = 1;
  std::vector<std::vector<uint32_t>> shard_endpoints;
  uint64_t token = 0;
  bool shm = false;
  std::string shm_handover; // the node's handover socket ("@NAME"; with shm)
  std::string shm_ticket;   // 32 bytes: collects this welcome's segments there once
  // A job on several nodes (schemas/control.capnp): empty for a one-node job.
  std::vector<std::string> job_nodes;      // HOST:PORT of each node, in ring order
  std::vector<std::string> job_node_names; // the names on the ring
  uint32_t node_index = 0;                 // this node among them
  uint32_t ring_vnodes = 0;
  uint64_t ring_version = 0;
  uint64_t resume_clock = 0; // where this rank goes on from (schemas/control.capnp)
  uint32_t replicas = 0;     // replicas of each chunk (schemas/control.capnp)
  job_spec spec;             // the job's spec as the node serves it (empty name: none)
  std::string fabric;        // the node's fabric provider for this job ("": none)
};

/// One side of a fabric connection (frame kind `fabric`; schemas/control.capnp).
struct fabric_offer {
  std::string provider;
  std::vector<std::byte> address;
  uint64_t slots_address = 0;
  uint64_t slots_key = 0;
  uint32_t slot_bytes = 0;
  uint32_t slot_count = 0;
  uint32_t conn_index = 0;
  uint32_t credit_batch = 0;  // slots per credit message it takes (0, 1: one each)
  bool frame_notices = false; // frames announced by notice messages (false: refused)
};

/// Where a worker wants a tensor's results (frame kind `place`; schemas/control.capnp).
struct fabric_place {
  uint32_t tensor = 0;
  uint64_t address = 0;
  uint64_t key = 0;
  uint64_t bytes = 0;
  uint32_t chunk_bytes = 0;
};

/// The node's challenge to a worker that says it holds the job's token, and the
/// worker's proof (runtime/credentials).
struct challenge_msg {
  std::vector<std::byte> nonce;
};
struct proof_msg {
  std::vector<std::byte> mac;
};
/// The payload of `attach` (schemas/control.capnp AttachProof).
struct attach_msg {
  std::vector<std::byte> nonce;
  std::vector<std::byte> mac;
};

/// The answer to `locate`: where the cluster coordinator listens.
struct located_msg {
  std::string coordinator; // HOST:PORT; empty or wildcard HOST: the host asked
  std::string node_name;
  std::string role;
  /// The coordinator's tenant door (HOST:PORT; "": none; an empty or wildcard HOST:
  /// the coordinator's host), where tenants' shells connect (protocol/tenant_door.hpp).
  std::string tenant_door;
};

/// A job's new ring, from each of its nodes (frame kind `reroute`).
struct reroute_msg {
  uint64_t ring_version = 0;
  std::vector<std::string> nodes; // names, in ring order
  uint32_t replicas = 0;          // replicas of each chunk on that ring
  /// Each node's worker address (HOST:PORT), as `nodes` (empty from an older node): a
  /// node the worker is not connected to yet (one joined the job) is reached there.
  std::vector<std::string> addresses;
  /// The sending node counted every push the old ring routed to it (a takeover: its
  /// chunks stayed): a worker sends again only what went to a chunk's former home.
  bool kept_pushes = false;
};

struct error_msg {
  errc code = errc::internal;
  std::string message;
  /// errc::moved: where to say hello instead (one: go there; several: the nearest).
  std::vector<std::string> candidates;
};

bytes encode(const hello_msg& x);
bytes encode(const welcome_msg& x);
bytes encode(const error_msg& x);
bytes encode(const challenge_msg& x);
bytes encode(const proof_msg& x);
bytes encode(const attach_msg& x);
bytes encode(const located_msg& x);
bytes encode(const reroute_msg& x);
bytes encode(const hyper_change& x);
bytes encode(const fabric_offer& x);
bytes encode(const fabric_place& x);

/// Each returns errc::ok or errc::bad_frame with `why` set.
errc decode(const std::byte* data, size_t size, hello_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, welcome_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, error_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, challenge_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, proof_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, attach_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, located_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, reroute_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, hyper_change& out, std::string& why);
errc decode(const std::byte* data, size_t size, fabric_offer& out, std::string& why);
errc decode(const std::byte* data, size_t size, fabric_place& out, std::string& why);

} // namespace rw::protocol
