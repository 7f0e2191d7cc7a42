#pragma once
// TLS on the control plane: every middleman connection (nodes' cluster links, shells,
// the Python cluster API, to the coordinator) through CAF's OpenSSL module, with mutual
// certificate authentication. A process given --tls-cert, --tls-key and --tls-ca
// publishes and connects only over TLS; its peers must present a certificate that
// chains to the CA (CAF checks the chain, not the host name: every holder of a
// certificate the CA signed is a member). Grants (a job's token) then never cross the
// network in clear.
//
// Without certificate files, a process given the cluster secret derives its TLS
// identity from it (runtime/control_certs.hpp): every member holds a certificate of
// the CA the secret derives, so the control plane is mutual TLS whenever there is a
// secret, and a peer without it fails the handshake before CAF reads a byte of BASP
// from it. Tenants never connect here: they speak to the coordinator's tenant door
// (actors/door/tenant_door.hpp). Without a secret and without files the control plane
// is plain TCP (docs/security.md).

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include <string>
#include <utility>
#include <vector>

namespace rw::actors {

/// PEM files: this process's certificate (chain), its private key, and the CA that
/// signed every member's certificate. All three or none.
struct tls_files {
  std::string cert;
  std::string key;
  std::string ca;
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

/// Checks the files now, not at the first connection: all three given, the key not
/// readable by other users (chmod 600, as the cluster secret), the certificate and key
/// a pair, and the certificate signed by the CA. Throws std::runtime_error saying which
/// and what to do. Nothing to check when none is given.
void check_tls_files(const tls_files& files);

/// What this process proves on the control plane.
struct control_identity {
  /// Certificates an operator made (--tls-*); when given, nothing is derived.
  tls_files files;
  /// A member (a node, an operator's shell or client): its certificate is derived from
  /// the cluster secret.
  std::string cluster_secret;
};

/// Checks `files` and, when given, loads CAF's OpenSSL module into `cfg` with them.
/// Call after register_cluster_types, before the actor system is made.
void configure_control_tls(caf::actor_system_config& cfg, const tls_files& files);

/// The same for every kind of identity: files as above; else certificates derived from
/// the cluster secret; else nothing (plain TCP). The PEM
/// text lives in sealed memory files of this process (/proc/self/fd/N), never on disk.
/// Throws std::runtime_error saying what is wrong.
void configure_control_tls(caf::actor_system_config& cfg, const control_identity& id);

/// Whether `sys` speaks TLS with a certificate derived from a secret.
bool derived_control_tls(caf::actor_system& sys);

/// Whether `sys` speaks TLS on the control plane (configure_control_tls with files).
bool control_tls(caf::actor_system& sys);

/// The middleman actor every control-plane connect goes through: the OpenSSL module's
/// when control_tls(sys), else the plain middleman's.
caf::io::middleman_actor control_middleman(caf::actor_system& sys);

/// A sentence for a failed control-plane connect, naming the likely mismatch (one side
/// with TLS, the other without) from this side's setting.
std::string tls_hint(caf::actor_system& sys);

} // namespace rw::actors
