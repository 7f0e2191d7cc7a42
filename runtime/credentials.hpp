#pragma once
// Job credentials. Creating a job yields a token (a 256-bit secret, written
// "rwt1_" + 64 hex digits). A worker never sends it: the node sends a fresh random
// nonce (challenge) and the worker answers with HMAC-SHA-256 keyed by the token over
// (nonce, job name, rank), which the node checks in constant time. A captured proof is
// worth nothing on another connection, for another rank or for another job.
// libsodium does the cryptography; nothing here is home-made.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rw::runtime {

using byte_vector = std::vector<std::byte>;

constexpr size_t nonce_bytes = 32;
constexpr size_t proof_bytes = 32;

/// Initialises libsodium once for the process. Throws std::runtime_error when it cannot
/// (no entropy source).
void init_sodium();

/// A new random token.
std::string make_token();

/// Whether `token` has the shape make_token gives (says nothing about which job).
bool well_formed_token(const std::string& token);

/// The secret in `path` (its first line, trimmed): the cluster secret, or (`what`) a
/// tenant's. Throws std::runtime_error naming the file when it cannot be read, is
/// shorter than 16 characters, or is open to users other than its owner (any group or
/// other permission bit: chmod 600).
std::string read_secret_file(const std::string& path,
                             const std::string& what = "cluster secret");

/// What a peer sends to prove it holds the cluster secret, for `nonce`.
byte_vector prove_cluster(const std::string& secret, const byte_vector& nonce);
/// Whether `mac` is that proof. Constant time in the contents of `mac`.
bool verify_cluster(const std::string& secret, const byte_vector& nonce,
                    const byte_vector& mac);

/// A random 64-bit value nobody can predict from earlier ones (attach tokens).
uint64_t random_u64();

/// A new random challenge.
byte_vector make_nonce();

/// The worker's answer to `nonce` for (job, rank).
byte_vector prove(const std::string& token, const byte_vector& nonce,
                  const std::string& job, uint32_t rank);

/// Whether `mac` answers `nonce` for (job, rank) with `token`. Constant time in the
/// contents of `mac`.
bool verify(const std::string& token, const byte_vector& nonce, const std::string& job,
            uint32_t rank, const byte_vector& mac);

/// A worker's proof, on a further endpoint of a node, that it joined `job` as `rank`
/// and got the welcome whose attach token is `attach_token`: keyed by the job's
/// `token` (empty for an open job: then by the attach token itself), over a fresh
/// `nonce` of the worker's (schemas/control.capnp AttachProof says the exact bytes).
byte_vector prove_attach(const std::string& token, uint64_t attach_token,
                         const byte_vector& nonce, const std::string& job, uint32_t rank);
/// Whether `mac` is that proof. Constant time in the contents of `mac`.
bool verify_attach(const std::string& token, uint64_t attach_token,
                   const byte_vector& nonce, const std::string& job, uint32_t rank,
                   const byte_vector& mac);

} // namespace rw::runtime
