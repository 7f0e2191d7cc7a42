#include "runtime/control_certs.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace rw::runtime {

namespace {

template <class T, void (*Free)(T*)>
struct deleter {
  void operator()(T* p) const { Free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, deleter<EVP_PKEY, EVP_PKEY_free>>;
using x509_ptr = std::unique_ptr<X509, deleter<X509, X509_free>>;
using bio_ptr = std::unique_ptr<BIO, deleter<BIO, BIO_free_all>>;

// The label HMAC'd with the scope: a new derivation (another key type, say) changes it.
constexpr const char* derivation_label = "rackweave control-plane CA v1\n";
// The CA's validity: fixed, so every process derives the same bytes. RFC 5280 4.1.2.5
// gives 99991231235959Z for "no well-defined expiration".
constexpr const char* ca_not_before = "20200101000000Z";
constexpr const char* not_after = "99991231235959Z";

[[noreturn]] void fail(const std::string& what) {
  std::string detail;
  while (auto code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    detail = text;
  }
  throw std::runtime_error("control-plane certificates: " + what
                           + (detail.empty() ? "" : " (" + detail + ")"));
}

void check(int rc, const char* what) {
  if (rc != 1)
    fail(what);
}

pkey_ptr ca_key(const std::string& secret, const std::string& scope) {
  const std::string message = derivation_label + scope;
  std::array<unsigned char, 32> seed{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(),
           seed.data(), &len)
        == nullptr
      || len != seed.size())
    fail("HMAC-SHA-256 failed");
  pkey_ptr key{
    EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size())};
  OPENSSL_cleanse(seed.data(), seed.size());
  if (!key)
    fail("cannot make the CA's Ed25519 key");
  return key;
}

std::string ca_name(const std::string& scope) {
  return "RackWeave control-plane CA (" + scope + ")";
}

void set_name(X509_NAME* name, const std::string& cn) {
  check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>("RackWeave"),
                                   -1, -1, 0),
        "cannot set a name");
  check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(cn.c_str()), -1,
                                   -1, 0),
        "cannot set a name");
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  auto* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr)
    fail("cannot make a certificate extension");
  auto rc = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  check(rc, "cannot add a certificate extension");
}

void set_time(ASN1_TIME* field, const char* when) {
  check(ASN1_TIME_set_string_X509(field, when), "cannot set a validity time");
}

x509_ptr make_ca(EVP_PKEY* key, const std::string& scope) {
  x509_ptr ca{X509_new()};
  if (!ca)
    fail("cannot make a certificate");
  check(X509_set_version(ca.get(), 2), "cannot set the version");
  check(ASN1_INTEGER_set(X509_get_serialNumber(ca.get()), 1), "cannot set the serial");
  set_time(X509_getm_notBefore(ca.get()), ca_not_before);
  set_time(X509_getm_notAfter(ca.get()), not_after);
  set_name(X509_get_subject_name(ca.get()), ca_name(scope));
  check(X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get())),
        "cannot set the issuer");
  check(X509_set_pubkey(ca.get(), key), "cannot set the public key");
  add_extension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_extension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_extension(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
  if (X509_sign(ca.get(), key, nullptr) <= 0) // Ed25519: no separate digest
    fail("cannot sign the CA certificate");
  return ca;
}

std::string pem_of(X509* cert) {
  bio_ptr out{BIO_new(BIO_s_mem())};
  if (!out || PEM_write_bio_X509(out.get(), cert) != 1)
    fail("cannot write a certificate");
  char* data = nullptr;
  auto n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string pem_of(EVP_PKEY* key) {
  bio_ptr out{BIO_new(BIO_s_mem())};
  if (!out
      || PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
           != 1)
    fail("cannot write a private key");
  char* data = nullptr;
  auto n = BIO_get_mem_data(out.get(), &data);
  std::string text(data, static_cast<size_t>(n));
  OPENSSL_cleanse(data, static_cast<size_t>(n));
  return text;
}

} // namespace

std::string derived_ca_cert(const std::string& secret, const std::string& scope) {
  if (secret.empty())
    throw std::invalid_argument("control-plane certificates: no secret to derive from");
  auto key = ca_key(secret, scope);
  return pem_of(make_ca(key.get(), scope).get());
}

tls_identity derived_identity(const std::string& secret, const std::string& scope,
                              const std::string& subject) {
  if (secret.empty())
    throw std::invalid_argument("control-plane certificates: no secret to derive from");
  auto key = ca_key(secret, scope);
  auto ca = make_ca(key.get(), scope);
  pkey_ptr own{EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")};
  if (!own)
    fail("cannot make an Ed25519 key");
  x509_ptr cert{X509_new()};
  if (!cert)
    fail("cannot make a certificate");
  check(X509_set_version(cert.get(), 2), "cannot set the version");
  std::array<unsigned char, 8> serial{};
  check(RAND_bytes(serial.data(), static_cast<int>(serial.size())),
        "no random serial number");
  serial[0] &= 0x7f; // a positive INTEGER
  uint64_t s = 0;
  for (auto b : serial)
    s = (s << 8) | b;
  check(ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), s | 1),
        "cannot set the serial");
  // A day back: the clocks of the cluster's hosts need not agree to the second.
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -24 * 3600) == nullptr)
    fail("cannot set a validity time");
  set_time(X509_getm_notAfter(cert.get()), not_after);
  set_name(X509_get_subject_name(cert.get()), subject);
  check(X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())),
        "cannot set the issuer");
  check(X509_set_pubkey(cert.get(), own.get()), "cannot set the public key");
  add_extension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_extension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
  add_extension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  add_extension(cert.get(), ca.get(), NID_subject_key_identifier, "hash");
  add_extension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
  if (X509_sign(cert.get(), key.get(), nullptr) <= 0)
    fail("cannot sign the certificate");
  return {pem_of(cert.get()), pem_of(own.get()), pem_of(ca.get())};
}

std::string common_name(const std::string& pem) {
  bio_ptr in{BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))};
  if (!in)
    return {};
  x509_ptr cert{PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr)};
  if (!cert)
    return {};
  char cn[256] = {};
  auto n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName,
                                     cn, sizeof(cn));
  return n > 0 ? std::string(cn, static_cast<size_t>(n)) : std::string{};
}

} // namespace rw::runtime
