#pragma once
// The tenant door (docs/wire-protocol.md, "The tenant door"): how a tenant's shell
// speaks to the cluster coordinator. Tenants never speak CAF's BASP: only processes
// that hold the cluster secret do. A tenant connects to the coordinator's door, both
// sides prove they hold the tenant's secret (HMAC-SHA-256 over both sides' nonces),
// and every frame after that is sealed (libsodium's secretstream,
// XChaCha20-Poly1305, one key per direction derived from the secret and both nonces),
// so a frame altered, dropped, replayed or reordered on the way ends the session.
//
// Frames: a 4-byte big-endian length, then that many bytes. The handshake, in the
// clear (each body starts with its kind):
//
//   shell -> door  hello    1, version 1, tenant length (1 byte), tenant, Nc (32 bytes)
//   door -> shell  challenge 2, Ns (32 bytes)
//   shell -> door  proof    3, Pc (32 bytes), the shell's secretstream header (24)
//   door -> shell  welcome  4, Ps (32 bytes), the door's secretstream header (24)
//   door -> shell  refusal  5, errc (2 bytes, big-endian), reason (UTF-8, <= 1 KiB)
//
// Pc and Ps are HMAC-SHA-256 keyed by the tenant's secret over (label, 0, tenant, 0,
// Nc, Ns) with the labels in tenant_door.cpp; the two directions' keys the same with
// their own labels. The door answers an unknown tenant exactly as a known one until
// the proof, and refuses both alike.
//
// Plain classes: no sockets, no CAF. The door's broker (actors/cluster/tenant_door)
// and the shell's client (apps/shell/tenant_client) drive them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"

namespace rw::protocol::door {

using bytes = std::vector<std::byte>;

constexpr uint8_t version = 1;
constexpr size_t nonce_bytes = 32;
constexpr size_t proof_bytes = 32;
constexpr size_t header_bytes = 24; // crypto_secretstream_xchacha20poly1305_HEADERBYTES
constexpr size_t seal_bytes = 17;   // crypto_secretstream_xchacha20poly1305_ABYTES
/// The largest handshake frame either side takes (a refusal: 3 + 1 KiB).
constexpr uint32_t max_handshake_frame = 3 + 1024;
/// The largest sealed frame the door takes from a shell (a request: a job with many
/// tensors fits).
constexpr uint32_t max_request_frame = (1u << 20) + seal_bytes;
/// The largest sealed frame a shell takes from the door (every job's report).
constexpr uint32_t max_reply_frame = (64u << 20) + seal_bytes;

enum class kind : uint8_t {
  hello = 1,
  challenge = 2,
  proof = 3,
  welcome = 4,
  refusal = 5
};

/// `body` with its 4-byte big-endian length in front.
bytes framed(const bytes& body);
/// The length a frame header names.
uint32_t frame_length(const std::byte (&header)[4]);

/// A refusal's body: `code` and `reason` (cut to 1 KiB).
bytes refusal(errc code, const std::string& reason);
/// Reads a refusal's body. False when it is not one.
bool read_refusal(const bytes& body, errc& code, std::string& reason);

/// One direction pair of an open session. Sealing and opening are in order: the n-th
/// frame opened must be the n-th sealed on the other side.
class channel {
public:
  channel(const std::array<unsigned char, 32>& send_key,
          const std::array<unsigned char, 32>& receive_key);
  ~channel();
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  /// The header the other side needs before it opens anything of ours.
  const std::array<unsigned char, header_bytes>& send_header() const;
  /// Takes the other side's header. False when it is unusable.
  bool accept_header(const unsigned char* header);

  /// `plain` sealed (seal_bytes longer).
  bytes seal(const std::byte* plain, size_t size);
  /// Opens `sealed` into `plain`. False when it is forged, altered, out of order or not
  /// a message: the session must end.
  bool open(const std::byte* sealed, size_t size, bytes& plain);

private:
  struct state;
  std::unique_ptr<state> s_;
};

/// The door's side of one connection's handshake.
class server_handshake {
public:
  /// `secret_of(tenant)`: that tenant's secret, or nothing if there is no such tenant.
  using secret_lookup = std::function<std::optional<std::string>(const std::string&)>;
  explicit server_handshake(secret_lookup secret_of);

  struct step {
    bytes reply;         // a frame body to send (may be empty)
    bool close = false;  // end the connection after sending `reply`
    std::string refused; // why, for the door's log ("": not refused)
  };
  /// Takes the body of the next handshake frame.
  step on_frame(const bytes& body);

  /// Once the welcome has gone: the tenant proved, and the session's channel.
  bool open() const { return channel_ != nullptr; }
  const std::string& tenant() const { return tenant_; }
  channel& session() { return *channel_; }

private:
  secret_lookup secret_of_;
  enum class phase { hello, proof, open, done } phase_ = phase::hello;
  std::string tenant_;
  std::optional<std::string> secret_;
  std::array<unsigned char, nonce_bytes> nc_{}, ns_{};
  std::unique_ptr<channel> channel_;
};

/// The shell's side of the handshake.
class client_handshake {
public:
  client_handshake(std::string tenant, std::string secret);

  /// The hello's body.
  bytes hello();
  /// Takes the door's answer to the hello (a challenge, or a refusal) and gives the
  /// proof's body. errc::ok, or why not (`why` says it for the user).
  errc on_challenge(const bytes& body, bytes& proof, std::string& why);
  /// Takes the door's answer to the proof (a welcome, or a refusal): checks the door's
  /// proof (only a holder of the tenant's secret makes it), then the channel is open.
  errc on_welcome(const bytes& body, std::string& why);

  std::unique_ptr<channel> take_session() { return std::move(channel_); }

private:
  std::string tenant_, secret_;
  std::array<unsigned char, nonce_bytes> nc_{}, ns_{};
  std::unique_ptr<channel> channel_;
};

} // namespace rw::protocol::door
