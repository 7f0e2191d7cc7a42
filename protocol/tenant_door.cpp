#include "protocol/tenant_door.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <sodium.h>

#include "runtime/credentials.hpp"
#include "runtime/tenants.hpp"

namespace rw::protocol::door {

static_assert(header_bytes == crypto_secretstream_xchacha20poly1305_HEADERBYTES);
static_assert(seal_bytes == crypto_secretstream_xchacha20poly1305_ABYTES);
static_assert(crypto_secretstream_xchacha20poly1305_KEYBYTES == 32);

namespace {

using key = std::array<unsigned char, 32>;
using nonce = std::array<unsigned char, nonce_bytes>;

constexpr const char* client_label = "rackweave tenant door v1: the shell's proof";
constexpr const char* server_label = "rackweave tenant door v1: the door's proof";
constexpr const char* c2s_label = "rackweave tenant door v1: shell to door key";
constexpr const char* s2c_label = "rackweave tenant door v1: door to shell key";

// HMAC-SHA-256 keyed by `secret` over (label, 0, tenant, 0, Nc, Ns).
key mac(const std::string& secret, const char* label, const std::string& tenant,
        const nonce& nc, const nonce& ns) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(secret.data()),
                              secret.size());
  const unsigned char zero = 0;
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label),
                                std::strlen(label));
  crypto_auth_hmacsha256_update(&st, &zero, 1);
  crypto_auth_hmacsha256_update(
    &st, reinterpret_cast<const unsigned char*>(tenant.data()), tenant.size());
  crypto_auth_hmacsha256_update(&st, &zero, 1);
  crypto_auth_hmacsha256_update(&st, nc.data(), nc.size());
  crypto_auth_hmacsha256_update(&st, ns.data(), ns.size());
  key out;
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof(st));
  return out;
}

std::byte b(unsigned x) {
  return static_cast<std::byte>(x);
}

const unsigned char* u(const bytes& x, size_t at = 0) {
  return reinterpret_cast<const unsigned char*>(x.data()) + at;
}

void append(bytes& out, const unsigned char* p, size_t n) {
  auto* q = reinterpret_cast<const std::byte*>(p);
  out.insert(out.end(), q, q + n);
}

kind kind_of(const bytes& body) {
  return body.empty() ? kind{0} : static_cast<kind>(body[0]);
}

std::string mismatch(const std::string& tenant) {
  return fmt::format("tenant '{}' and this secret do not match (an unknown tenant or a "
                     "wrong --tenant-secret-file)",
                     tenant);
}

} // namespace

bytes framed(const bytes& body) {
  auto n = static_cast<uint32_t>(body.size());
  bytes out(4 + body.size());
  out[0] = b(n >> 24);
  out[1] = b(n >> 16);
  out[2] = b(n >> 8);
  out[3] = b(n);
  std::copy(body.begin(), body.end(), out.begin() + 4);
  return out;
}

uint32_t frame_length(const std::byte (&h)[4]) {
  return (std::to_integer<uint32_t>(h[0]) << 24) | (std::to_integer<uint32_t>(h[1]) << 16)
         | (std::to_integer<uint32_t>(h[2]) << 8) | std::to_integer<uint32_t>(h[3]);
}

bytes refusal(errc code, const std::string& reason) {
  auto c = static_cast<uint16_t>(code);
  bytes out{b(static_cast<unsigned>(kind::refusal)), b(c >> 8), b(c & 0xff)};
  auto n = std::min<size_t>(reason.size(), 1024);
  auto* p = reinterpret_cast<const std::byte*>(reason.data());
  out.insert(out.end(), p, p + n);
  return out;
}

bool read_refusal(const bytes& body, errc& code, std::string& reason) {
  if (body.size() < 3 || kind_of(body) != kind::refusal || body.size() > 3 + 1024)
    return false;
  code = static_cast<errc>((std::to_integer<uint16_t>(body[1]) << 8)
                           | std::to_integer<uint16_t>(body[2]));
  reason.assign(reinterpret_cast<const char*>(body.data()) + 3, body.size() - 3);
  return true;
}

// --- channel --------------------------------------------------------------------

struct channel::state {
  crypto_secretstream_xchacha20poly1305_state push{}, pull{};
  std::array<unsigned char, header_bytes> header{};
  key receive_key{};
  bool pulling = false;
  ~state() {
    sodium_memzero(&push, sizeof(push));
    sodium_memzero(&pull, sizeof(pull));
    sodium_memzero(receive_key.data(), receive_key.size());
  }
};

channel::channel(const key& send_key, const key& receive_key)
  : s_(std::make_unique<state>()) {
  runtime::init_sodium();
  crypto_secretstream_xchacha20poly1305_init_push(&s_->push, s_->header.data(),
                                                  send_key.data());
  s_->receive_key = receive_key;
}

channel::~channel() = default;

const std::array<unsigned char, header_bytes>& channel::send_header() const {
  return s_->header;
}

bool channel::accept_header(const unsigned char* header) {
  if (s_->pulling)
    return false;
  s_->pulling = crypto_secretstream_xchacha20poly1305_init_pull(&s_->pull, header,
                                                                s_->receive_key.data())
                == 0;
  sodium_memzero(s_->receive_key.data(), s_->receive_key.size());
  return s_->pulling;
}

bytes channel::seal(const std::byte* plain, size_t size) {
  bytes out(size + seal_bytes);
  unsigned long long n = 0;
  crypto_secretstream_xchacha20poly1305_push(
    &s_->push, reinterpret_cast<unsigned char*>(out.data()), &n,
    reinterpret_cast<const unsigned char*>(plain), size, nullptr, 0,
    crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
  out.resize(n);
  return out;
}

bool channel::open(const std::byte* sealed, size_t size, bytes& plain) {
  if (!s_->pulling || size < seal_bytes)
    return false;
  plain.resize(size - seal_bytes);
  unsigned long long n = 0;
  unsigned char tag = 0;
  if (crypto_secretstream_xchacha20poly1305_pull(
        &s_->pull, reinterpret_cast<unsigned char*>(plain.data()), &n, &tag,
        reinterpret_cast<const unsigned char*>(sealed), size, nullptr, 0)
        != 0
      || tag != crypto_secretstream_xchacha20poly1305_TAG_MESSAGE) {
    plain.clear();
    return false;
  }
  plain.resize(n);
  return true;
}

// --- the door's side ---------------------------------------------------------------

server_handshake::server_handshake(secret_lookup secret_of)
  : secret_of_(std::move(secret_of)) {
  runtime::init_sodium();
}

server_handshake::step server_handshake::on_frame(const bytes& body) {
  step out;
  auto refuse = [&](errc code, const std::string& why) {
    out.reply = refusal(code, why);
    out.close = true;
    out.refused = why;
    phase_ = phase::done;
    return out;
  };
  switch (phase_) {
    case phase::hello: {
      if (kind_of(body) != kind::hello || body.size() < 3)
        return refuse(errc::bad_frame, "not a tenant door hello");
      if (std::to_integer<uint8_t>(body[1]) != version)
        return refuse(errc::bad_version,
                      fmt::format("tenant door version {} is not spoken here (only {})",
                                  std::to_integer<unsigned>(body[1]), version));
      size_t len = std::to_integer<uint8_t>(body[2]);
      if (body.size() != 3 + len + nonce_bytes)
        return refuse(errc::bad_frame, "a hello of the wrong length");
      tenant_.assign(reinterpret_cast<const char*>(body.data()) + 3, len);
      if (auto why = runtime::tenant_name_error(tenant_); !why.empty()) {
        tenant_.clear();
        return refuse(errc::bad_frame, why);
      }
      std::memcpy(nc_.data(), u(body, 3 + len), nonce_bytes);
      secret_ = secret_of_(tenant_);
      randombytes_buf(ns_.data(), ns_.size());
      out.reply.push_back(b(static_cast<unsigned>(kind::challenge)));
      append(out.reply, ns_.data(), ns_.size());
      phase_ = phase::proof;
      return out;
    }
    case phase::proof: {
      if (kind_of(body) != kind::proof || body.size() != 1 + proof_bytes + header_bytes)
        return refuse(errc::bad_frame, "not a tenant door proof");
      // An unknown tenant's proof is checked against a key nobody holds: it fails as a
      // wrong secret does, in the same time.
      std::string secret;
      if (secret_) {
        secret = *secret_;
      } else {
        secret.resize(32);
        randombytes_buf(secret.data(), secret.size());
      }
      auto expected = mac(secret, client_label, tenant_, nc_, ns_);
      bool good = crypto_verify_32(expected.data(), u(body, 1)) == 0 && secret_;
      if (!good) {
        sodium_memzero(secret.data(), secret.size());
        return refuse(errc::unauthorized, mismatch(tenant_));
      }
      auto s2c = mac(secret, s2c_label, tenant_, nc_, ns_);
      auto c2s = mac(secret, c2s_label, tenant_, nc_, ns_);
      auto proof = mac(secret, server_label, tenant_, nc_, ns_);
      sodium_memzero(secret.data(), secret.size());
      secret_.reset();
      auto ch = std::make_unique<channel>(s2c, c2s);
      sodium_memzero(s2c.data(), s2c.size());
      sodium_memzero(c2s.data(), c2s.size());
      if (!ch->accept_header(u(body, 1 + proof_bytes)))
        return refuse(errc::bad_frame, "an unusable secretstream header");
      out.reply.push_back(b(static_cast<unsigned>(kind::welcome)));
      append(out.reply, proof.data(), proof.size());
      append(out.reply, ch->send_header().data(), header_bytes);
      channel_ = std::move(ch);
      phase_ = phase::open;
      return out;
    }
    case phase::open:
    case phase::done: break;
  }
  return refuse(errc::bad_frame, "a handshake frame after the handshake");
}

// --- the shell's side --------------------------------------------------------------

client_handshake::client_handshake(std::string tenant, std::string secret)
  : tenant_(std::move(tenant)), secret_(std::move(secret)) {
  runtime::init_sodium();
}

bytes client_handshake::hello() {
  randombytes_buf(nc_.data(), nc_.size());
  bytes out{b(static_cast<unsigned>(kind::hello)), b(version),
            b(static_cast<unsigned>(tenant_.size()))};
  append(out, reinterpret_cast<const unsigned char*>(tenant_.data()), tenant_.size());
  append(out, nc_.data(), nc_.size());
  return out;
}

errc client_handshake::on_challenge(const bytes& body, bytes& proof, std::string& why) {
  errc code = errc::ok;
  if (read_refusal(body, code, why))
    return code == errc::ok ? errc::bad_frame : code;
  if (kind_of(body) != kind::challenge || body.size() != 1 + nonce_bytes) {
    why = "the door's answer to the hello is not a challenge";
    return errc::bad_frame;
  }
  std::memcpy(ns_.data(), u(body, 1), nonce_bytes);
  auto c2s = mac(secret_, c2s_label, tenant_, nc_, ns_);
  auto s2c = mac(secret_, s2c_label, tenant_, nc_, ns_);
  channel_ = std::make_unique<channel>(c2s, s2c);
  sodium_memzero(c2s.data(), c2s.size());
  sodium_memzero(s2c.data(), s2c.size());
  auto p = mac(secret_, client_label, tenant_, nc_, ns_);
  proof = {b(static_cast<unsigned>(kind::proof))};
  append(proof, p.data(), p.size());
  append(proof, channel_->send_header().data(), header_bytes);
  return errc::ok;
}

errc client_handshake::on_welcome(const bytes& body, std::string& why) {
  errc code = errc::ok;
  if (read_refusal(body, code, why))
    return code == errc::ok ? errc::bad_frame : code;
  if (kind_of(body) != kind::welcome || body.size() != 1 + proof_bytes + header_bytes
      || !channel_) {
    why = "the door's answer to the proof is not a welcome";
    return errc::bad_frame;
  }
  auto expected = mac(secret_, server_label, tenant_, nc_, ns_);
  if (crypto_verify_32(expected.data(), u(body, 1)) != 0) {
    channel_.reset();
    why = fmt::format("the door did not prove it holds tenant '{}''s secret: it is not "
                      "the cluster's coordinator",
                      tenant_);
    return errc::unauthorized;
  }
  if (!channel_->accept_header(u(body, 1 + proof_bytes))) {
    channel_.reset();
    why = "the door sent an unusable secretstream header";
    return errc::bad_frame;
  }
  return errc::ok;
}

} // namespace rw::protocol::door
