#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <catch2/catch.hpp>

#include "runtime/credentials.hpp"

namespace rw_unit_credentials {

using namespace rw::runtime;

TEST_CASE("tokens are fresh 256-bit secrets of one shape", "[credentials]") {
  auto a = make_token();
  auto b = make_token();
  CHECK(a != b);
  CHECK(well_formed_token(a));
  CHECK(a.size() == 5 + 64);
  CHECK_FALSE(well_formed_token("rwt1_xyz"));
  CHECK_FALSE(well_formed_token(""));
  CHECK_FALSE(well_formed_token("rwt2_" + a.substr(5)));
}

TEST_CASE("a proof answers one challenge, for one job and rank, with one token",
          "[credentials]") {
  auto token = make_token();
  auto nonce = make_nonce();
  REQUIRE(nonce.size() == nonce_bytes);
  auto mac = prove(token, nonce, "job-a", 3);
  CHECK(mac.size() == proof_bytes);
  CHECK(verify(token, nonce, "job-a", 3, mac));
  CHECK_FALSE(verify(make_token(), nonce, "job-a", 3, mac)); // another token
  CHECK_FALSE(verify(token, make_nonce(), "job-a", 3, mac)); // a replay elsewhere
  CHECK_FALSE(verify(token, nonce, "job-b", 3, mac));        // another job
  CHECK_FALSE(verify(token, nonce, "job-a", 4, mac));        // another rank
  auto flipped = mac;
  flipped[0] ^= std::byte{1};
  CHECK_FALSE(verify(token, nonce, "job-a", 3, flipped));
  flipped.pop_back();
  CHECK_FALSE(verify(token, nonce, "job-a", 3, flipped)); // wrong length
  // The proof does not contain the token.
  auto* raw = reinterpret_cast<const char*>(mac.data());
  CHECK(std::string(raw, mac.size()).find(token.substr(5, 8)) == std::string::npos);
}

TEST_CASE("a cluster secret file open to other users is refused", "[credentials]") {
  auto path = std::string{"/tmp/rw-secret-test-"} + std::to_string(::getpid());
  std::ofstream{path} << "correct-horse-battery-staple-42\n";
  ::chmod(path.c_str(), 0600);
  CHECK(read_secret_file(path) == "correct-horse-battery-staple-42");
  ::chmod(path.c_str(), 0640);
  CHECK_THROWS_WITH(read_secret_file(path), Catch::Contains("open to other users")
                                              && Catch::Contains("0640")
                                              && Catch::Contains("chmod 600"));
  ::chmod(path.c_str(), 0604);
  CHECK_THROWS_WITH(read_secret_file(path), Catch::Contains("chmod 600"));
  std::remove(path.c_str());
}

} // namespace rw_unit_credentials
