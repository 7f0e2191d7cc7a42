#include "apps/tools/bearer_token.hpp"

#include <array>
#include <stdexcept>

#include <sodium.h>

namespace rw::tools {

namespace {

std::array<unsigned char, crypto_generichash_BYTES> digest(std::string_view s) {
  std::array<unsigned char, crypto_generichash_BYTES> out{};
  crypto_generichash(out.data(), out.size(),
                     reinterpret_cast<const unsigned char*>(s.data()), s.size(), nullptr,
                     0);
  return out;
}

} // namespace

bool bearer_token_matches(std::string_view authorization, const std::string& token) {
  if (sodium_init() < 0)
    throw std::runtime_error("libsodium failed to initialise");
  std::string_view presented;
  constexpr std::string_view scheme = "bearer";
  if (authorization.size() > scheme.size()) {
    bool is_bearer = true;
    for (size_t i = 0; i < scheme.size(); ++i) {
      char c = authorization[i];
      if ((c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c) != scheme[i])
        is_bearer = false;
    }
    auto rest = authorization.substr(scheme.size());
    if (is_bearer && (rest.front() == ' ' || rest.front() == '\t')) {
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
        rest.remove_prefix(1);
      presented = rest;
    }
  }
  // Hashed either way, so a request without a bearer token takes as long as one with
  // a wrong token.
  auto want = digest(token);
  auto got = digest(presented);
  bool same = sodium_memcmp(want.data(), got.data(), want.size()) == 0;
  return same && !presented.empty() && !token.empty();
}

} // namespace rw::tools
