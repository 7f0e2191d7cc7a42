// One control-message decoder (protocol/control.hpp), chosen at build time by
// RW_FUZZ_MESSAGE (tests/fuzz/CMakeLists.txt builds one target per message): any bytes
// decode or are refused with a reason; what decodes re-encodes to bytes that decode, and
// encoding is stable from then on (encode(decode(encode(m))) == encode(m)).

#include <cstdint>
#include <string>

#include "protocol/control.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace pr = rw::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using message = RW_FUZZ_MESSAGE;
  message m;
  std::string why;
  if (pr::decode(reinterpret_cast<const std::byte*>(data), size, m, why)
      != rw::errc::ok) {
    if (why.empty())
      rw::fuzz::fail("a refused message comes without a reason");
    return 0;
  }
  auto once = pr::encode(m);
  message again;
  if (pr::decode(once.data(), once.size(), again, why) != rw::errc::ok)
    rw::fuzz::fail("a decoded message does not decode once encoded: " + why);
  if (pr::encode(again) != once)
    rw::fuzz::fail("a message changes through encode and decode");
  return 0;
}
