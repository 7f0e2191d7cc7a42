// Control-plane certificates derived from a secret (runtime/control_certs.hpp): the CA
// is the same bytes wherever it is derived, and a TLS handshake with the settings CAF's
// OpenSSL module uses (TLS 1.2, "HIGH:!aNULL:!MD5", a peer certificate required on both
// sides) passes between holders of one secret and fails for anyone else.

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "runtime/control_certs.hpp"

namespace rw_unit_control_certs {

using namespace rw::runtime;

const std::string secret = "correct-horse-battery-staple-42";

X509* read_cert(const std::string& pem) {
  auto* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  auto* x = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  return x;
}

EVP_PKEY* read_key(const std::string& pem) {
  auto* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  auto* k = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  return k;
}

// A context as CAF's session makes one: own certificate and key, the trusted CAs
// (several PEM certificates in one text), the peer's certificate required.
SSL_CTX* context(const tls_identity& me, const std::string& trusted) {
  auto* ctx = SSL_CTX_new(TLSv1_2_method());
  REQUIRE(ctx != nullptr);
  auto* cert = read_cert(me.cert);
  auto* key = read_key(me.key);
  REQUIRE(SSL_CTX_use_certificate(ctx, cert) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey(ctx, key) == 1);
  X509_free(cert);
  EVP_PKEY_free(key);
  auto* in = BIO_new_mem_buf(trusted.data(), static_cast<int>(trusted.size()));
  while (auto* ca = PEM_read_bio_X509(in, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
  }
  BIO_free(in);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  REQUIRE(SSL_CTX_set_cipher_list(ctx, "HIGH:!aNULL:!MD5") == 1);
  return ctx;
}

// Runs a handshake between a client and a server in memory; true if both finish.
bool handshake(const tls_identity& client, const std::string& client_trusts,
               const tls_identity& server, const std::string& server_trusts) {
  auto* cctx = context(client, client_trusts);
  auto* sctx = context(server, server_trusts);
  auto* c = SSL_new(cctx);
  auto* s = SSL_new(sctx);
  BIO *c_io = nullptr, *s_io = nullptr;
  REQUIRE(BIO_new_bio_pair(&c_io, 1 << 16, &s_io, 1 << 16) == 1);
  SSL_set_bio(c, c_io, c_io);
  SSL_set_bio(s, s_io, s_io);
  SSL_set_connect_state(c);
  SSL_set_accept_state(s);
  bool c_done = false, s_done = false, failed = false;
  for (int round = 0; round < 50 && !(c_done && s_done) && !failed; ++round) {
    if (!c_done) {
      auto rc = SSL_do_handshake(c);
      c_done = rc == 1;
      if (rc <= 0 && SSL_get_error(c, rc) != SSL_ERROR_WANT_READ)
        failed = true;
    }
    if (!s_done) {
      auto rc = SSL_do_handshake(s);
      s_done = rc == 1;
      if (rc <= 0 && SSL_get_error(s, rc) != SSL_ERROR_WANT_READ)
        failed = true;
    }
  }
  SSL_free(c);
  SSL_free(s);
  SSL_CTX_free(cctx);
  SSL_CTX_free(sctx);
  return c_done && s_done && !failed;
}

TEST_CASE("the derived CA is the same bytes wherever the secret derives it",
          "[control_certs]") {
  auto a = derived_ca_cert(secret, cluster_scope);
  CHECK(a == derived_ca_cert(secret, cluster_scope));
  CHECK(a.find("BEGIN CERTIFICATE") != std::string::npos);
  CHECK(a != derived_ca_cert(secret + "!", cluster_scope));
  CHECK(a != derived_ca_cert(secret, "another scope"));
  CHECK(common_name(a) == "RackWeave control-plane CA (cluster)");
  CHECK_THROWS(derived_ca_cert("", cluster_scope));
}

TEST_CASE("each identity has a key of its own, signed by the derived CA",
          "[control_certs]") {
  auto a = derived_identity(secret, cluster_scope, "node a");
  auto b = derived_identity(secret, cluster_scope, "node b");
  CHECK(a.key != b.key);
  CHECK(a.ca == b.ca);
  CHECK(a.ca == derived_ca_cert(secret, cluster_scope));
  CHECK(common_name(a.cert) == "node a");
  CHECK(a.key.find("PRIVATE KEY") != std::string::npos);
  CHECK(common_name("not a certificate").empty());
}

TEST_CASE("TLS as CAF runs it: holders of one secret shake hands, strangers do not",
          "[control_certs]") {
  auto server = derived_identity(secret, cluster_scope, "coordinator");
  auto member = derived_identity(secret, cluster_scope, "operator");
  auto stranger = derived_identity("another-secret-of-16+", cluster_scope, "stranger");
  auto ca = server.ca;
  CHECK(handshake(member, ca, server, ca));
  // A stranger with a certificate of its own CA, trusting ours or its own.
  CHECK_FALSE(handshake(stranger, ca, server, ca));
  CHECK_FALSE(handshake(stranger, stranger.ca, server, ca));
  // A member never takes a server whose CA it does not hold.
  CHECK_FALSE(handshake(member, ca, stranger, stranger.ca + ca));
  // Another scope of the same secret is another CA: its certificates do not pass.
  auto scoped = derived_identity(secret, "another scope", "x");
  CHECK_FALSE(handshake(scoped, ca, server, ca));
}

} // namespace rw_unit_control_certs
