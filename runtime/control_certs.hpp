#pragma once
// Control-plane certificates derived from a shared secret (docs/security.md).
//
// An operator who gives only --cluster-secret-file still gets mutual TLS before any
// BASP byte: every holder of the secret derives the same certificate authority from it
// (an Ed25519 key whose 32-byte seed is HMAC-SHA-256 keyed by the secret over a fixed
// label and the scope), and signs a certificate for a fresh key of its own with it. A
// peer without the secret holds no certificate that CA signed, and the TLS handshake
// fails before CAF reads a byte of BASP from it. Tenants hold no certificate: they
// speak to the coordinator's tenant door (protocol/tenant_door.hpp).
//
// The CA's certificate is the same bytes in every process that derives it (fixed
// serial, validity and names, and Ed25519 signatures are deterministic).
//
// Plain OpenSSL, no CAF: actors/node/control_tls.hpp hands the PEM text to CAF.

#include <string>

namespace rw::runtime {

/// PEM text of one TLS identity: a certificate, its private key (PKCS#8, unencrypted)
/// and the certificate of the CA that signed it.
struct tls_identity {
  std::string cert;
  std::string key;
  std::string ca;
};

/// The scope of the cluster's own CA (nodes and operators: the cluster secret).
inline const std::string cluster_scope = "cluster";

/// The certificate (PEM) of the CA that `secret` derives for `scope`: the same bytes
/// wherever it is derived. Throws std::runtime_error when OpenSSL fails.
std::string derived_ca_cert(const std::string& secret, const std::string& scope);

/// A fresh Ed25519 key and a certificate for it (subject CN = `subject`, valid from a
/// day ago, usable by a TLS client and server) signed by the CA that `secret` derives
/// for `scope`. Throws std::runtime_error when OpenSSL fails.
tls_identity derived_identity(const std::string& secret, const std::string& scope,
                              const std::string& subject);

/// The subject's common name of the certificate in `pem` ("" if none or unreadable).
std::string common_name(const std::string& pem);

} // namespace rw::runtime
