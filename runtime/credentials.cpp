#include "runtime/credentials.hpp"

#include <sodium.h>

#include <sys/stat.h>

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

namespace rw::runtime {

namespace {

constexpr const char* token_prefix = "rwt1_";
constexpr size_t token_secret_bytes = 32;
constexpr const char* proof_context = "rackweave-auth-v1";
constexpr const char* attach_context = "rackweave attach";

std::string to_hex(const unsigned char* data, size_t size) {
  std::string out(size * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), data, size);
  out.pop_back(); // the terminating NUL
  return out;
}

} // namespace

void init_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready)
    throw std::runtime_error("libsodium failed to initialise (no entropy source?)");
}

std::string make_token() {
  init_sodium();
  unsigned char secret[token_secret_bytes];
  randombytes_buf(secret, sizeof(secret));
  auto token = token_prefix + to_hex(secret, sizeof(secret));
  sodium_memzero(secret, sizeof(secret));
  return token;
}

bool well_formed_token(const std::string& token) {
  std::string prefix = token_prefix;
  if (token.size() != prefix.size() + 2 * token_secret_bytes
      || token.compare(0, prefix.size(), prefix) != 0)
    return false;
  for (size_t i = prefix.size(); i < token.size(); ++i) {
    auto c = token[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  }
  return true;
}

std::string read_secret_file(const std::string& path, const std::string& what) {
  struct stat kind {};
  if (stat(path.c_str(), &kind) == 0 && !S_ISREG(kind.st_mode))
    throw std::runtime_error(
      fmt::format("the {} file {} is not a regular file", what, path));
  std::ifstream in{path};
  if (!in)
    throw std::runtime_error(fmt::format("cannot read the {} file {}", what, path));
  constexpr size_t max_line = 4096; // a secret is one short line
  std::string secret(max_line, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(max_line));
  secret.resize(static_cast<size_t>(in.gcount()));
  if (auto nl = secret.find('\n'); nl != std::string::npos)
    secret.resize(nl);
  else if (secret.size() == max_line)
    throw std::runtime_error(
      fmt::format("the {} file {} has no line break in its first {} "
                  "bytes: a secret is one line",
                  what, path, max_line));
  auto end = secret.find_last_not_of(" \t\r\n");
  secret.erase(end == std::string::npos ? 0 : end + 1);
  if (secret.size() < 16)
    throw std::runtime_error(
      fmt::format("the {} in {} is shorter than 16 characters (make "
                  "one: head -c 32 /dev/urandom | base64)",
                  what, path));
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    throw std::runtime_error(
      fmt::format("the {} file {} is open to other users (mode {:04o}): a "
                  "secret others can read is no secret; chmod 600 {}",
                  what, path, info.st_mode & 07777, path));
  return secret;
}

// The cluster's proofs are the job proofs' construction for a name no job can have
// (job names are what the coordinator validates; this one is reserved by its context).
constexpr const char* cluster_context = "\x01rw-cluster";

byte_vector prove_cluster(const std::string& secret, const byte_vector& nonce) {
  return prove(secret, nonce, cluster_context, 0);
}

bool verify_cluster(const std::string& secret, const byte_vector& nonce,
                    const byte_vector& mac) {
  return verify(secret, nonce, cluster_context, 0, mac);
}

uint64_t random_u64() {
  init_sodium();
  uint64_t x = 0;
  randombytes_buf(&x, sizeof(x));
  return x;
}

byte_vector make_nonce() {
  init_sodium();
  byte_vector nonce(nonce_bytes);
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

namespace {

// HMAC-SHA-256 keyed by `key` over (context, NUL, nonce, extra, job, NUL, rank as 4
// little-endian bytes).
byte_vector mac_over(const std::string& key, const char* context,
                     const byte_vector& nonce, const unsigned char* extra,
                     size_t extra_bytes, const std::string& job, uint32_t rank) {
  init_sodium();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()),
                              key.size());
  auto feed = [&](const void* p, size_t n) {
    crypto_auth_hmacsha256_update(&st, static_cast<const unsigned char*>(p), n);
  };
  feed(context, std::char_traits<char>::length(context) + 1); // with its NUL
  feed(nonce.data(), nonce.size());
  feed(extra, extra_bytes);
  feed(job.data(), job.size());
  const unsigned char sep = 0;
  feed(&sep, 1);
  const unsigned char r[4] = {
    static_cast<unsigned char>(rank), static_cast<unsigned char>(rank >> 8),
    static_cast<unsigned char>(rank >> 16), static_cast<unsigned char>(rank >> 24)};
  feed(r, sizeof(r));
  byte_vector mac(crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(mac.data()));
  sodium_memzero(&st, sizeof(st));
  return mac;
}

bool same_mac(const byte_vector& expected, const byte_vector& mac) {
  return mac.size() == crypto_auth_hmacsha256_BYTES
         && crypto_verify_32(reinterpret_cast<const unsigned char*>(expected.data()),
                             reinterpret_cast<const unsigned char*>(mac.data()))
              == 0;
}

} // namespace

byte_vector prove(const std::string& token, const byte_vector& nonce,
                  const std::string& job, uint32_t rank) {
  return mac_over(token, proof_context, nonce, nullptr, 0, job, rank);
}

byte_vector prove_attach(const std::string& token, uint64_t attach_token,
                         const byte_vector& nonce, const std::string& job,
                         uint32_t rank) {
  unsigned char t[8];
  for (int i = 0; i < 8; ++i)
    t[i] = static_cast<unsigned char>(attach_token >> (8 * i));
  auto key = token.empty() ? fmt::format("{:016x}", attach_token) : token;
  return mac_over(key, attach_context, nonce, t, sizeof(t), job, rank);
}

bool verify_attach(const std::string& token, uint64_t attach_token,
                   const byte_vector& nonce, const std::string& job, uint32_t rank,
                   const byte_vector& mac) {
  if (nonce.size() != nonce_bytes)
    return false;
  return same_mac(prove_attach(token, attach_token, nonce, job, rank), mac);
}

bool verify(const std::string& token, const byte_vector& nonce, const std::string& job,
            uint32_t rank, const byte_vector& mac) {
  if (nonce.size() != nonce_bytes)
    return false;
  return same_mac(prove(token, nonce, job, rank), mac);
}

} // namespace rw::runtime
