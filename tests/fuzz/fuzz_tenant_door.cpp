// Several tenant-door sessions interleaved (protocol/tenant_door.hpp, the door's side,
// and actors/door/requests.hpp): the input is the network, mixing bytes of its own with
// frames real shells made, and moving frames between connections. Properties:
//  - a connection opens only when every handshake frame it took came from its own
//    shell, with the tenant's secret, and then speaks for that tenant;
//  - a sealed frame opens only on the connection whose shell sealed it, in the order
//    sealed, and the shell opens only what its own door sealed;
//  - a request that opens either decodes or is refused: the decoder never crashes.
//
// Input: records of [op][length: 2 bytes, little-endian][length bytes]; op's low 2 bits
// pick one of 4 connections, bits 2-4 what to do:
//   0 raw: the bytes, as a frame body, to the connection's door
//   1 shell: the connection's own shell takes its next handshake step (hello, then the
//     proof of the door's last reply), or once open seals the bytes as a request
//   2 wrong shell: as 1, with another secret
//   3 steal: the last frame another connection's shell sent (the connection named by
//     the first byte), to this connection's door
//   4 reply: this connection's door seals the bytes; its shell must open them

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/door/requests.hpp"
#include "protocol/tenant_door.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace door = rw::protocol::door;

namespace {

const std::string vision_secret = "vision-secret-0123456789";

struct connection {
  std::unique_ptr<door::server_handshake> server;
  std::unique_ptr<door::client_handshake> shell;
  std::unique_ptr<door::channel> shell_session;
  door::bytes last_reply;    // the door's last handshake reply
  door::bytes last_sent;     // the last frame its shell sent
  bool foreign = false;      // took a handshake frame its shell did not make
  bool wrong_secret = false; // its shell used another secret
  int shell_steps = 0;
  uint64_t sealed = 0, opened = 0; // requests sealed by its shell, opened by its door
};

void reset(connection& c) {
  c = connection{};
  c.server = std::make_unique<door::server_handshake>(
    [](const std::string& t) -> std::optional<std::string> {
      if (t == "vision")
        return vision_secret;
      return std::nullopt;
    });
}

void to_door(connection& c, const door::bytes& body, bool own) {
  if (!c.server->open()) {
    if (!own)
      c.foreign = true;
    auto step = c.server->on_frame(body);
    c.last_reply = step.reply;
    if (c.server->open()) {
      if (c.foreign || c.wrong_secret)
        rw::fuzz::fail("a door opened with a handshake frame its shell did not make");
      if (c.server->tenant() != "vision")
        rw::fuzz::fail("a door opened for a tenant nobody proved");
    }
    if (step.close)
      reset(c);
    return;
  }
  door::bytes plain;
  if (c.server->session().open(body.data(), body.size(), plain)) {
    if (!own)
      rw::fuzz::fail("a sealed frame opened on a connection whose shell did not seal it");
    if (++c.opened > c.sealed)
      rw::fuzz::fail("a door opened more frames than its shell sealed");
    rw::actors::door::request r;
    std::string why;
    (void)rw::actors::door::decode(plain, r, why);
  } else {
    reset(c); // the door ends the session
  }
}

void shell_step(connection& c, const door::bytes& bytes, bool wrong) {
  if (c.shell_session) {
    auto sealed = c.shell_session->seal(bytes.data(), bytes.size());
    ++c.sealed;
    c.last_sent = sealed;
    to_door(c, sealed, true);
    return;
  }
  if (c.shell_steps == 0) {
    c.wrong_secret = wrong;
    c.shell = std::make_unique<door::client_handshake>(
      "vision", wrong ? std::string("another-secret-0123456") : vision_secret);
    c.last_sent = c.shell->hello();
    ++c.shell_steps;
    to_door(c, c.last_sent, true);
    return;
  }
  if (c.shell_steps == 1 && c.shell) {
    door::bytes proof;
    std::string why;
    if (c.shell->on_challenge(c.last_reply, proof, why) != rw::errc::ok)
      return;
    c.last_sent = proof;
    ++c.shell_steps;
    to_door(c, proof, true);
    if (c.server->open()) {
      if (c.shell->on_welcome(c.last_reply, why) != rw::errc::ok)
        rw::fuzz::fail("a shell refused the welcome of a door it proved itself to");
      c.shell_session = c.shell->take_session();
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::array<connection, 4> conns;
  for (auto& c : conns)
    reset(c);
  size_t at = 0;
  for (int records = 0; at + 3 <= size && records < 64; ++records) {
    uint8_t op = data[at];
    size_t len = data[at + 1] | (size_t(data[at + 2]) << 8);
    at += 3;
    len = std::min(len, size - at);
    auto* p = reinterpret_cast<const std::byte*>(data + at);
    door::bytes bytes(p, p + len);
    at += len;
    auto& c = conns[op & 3];
    switch ((op >> 2) & 7) {
      case 0: to_door(c, bytes, false); break;
      case 1: shell_step(c, bytes, false); break;
      case 2: shell_step(c, bytes, true); break;
      case 3: {
        auto& from = conns[(bytes.empty() ? 0 : std::to_integer<size_t>(bytes[0])) & 3];
        if (&from != &c && !from.last_sent.empty())
          to_door(c, from.last_sent, false);
        break;
      }
      case 4:
        if (c.server->open() && c.shell_session) {
          auto sealed = c.server->session().seal(bytes.data(), bytes.size());
          door::bytes plain;
          if (!c.shell_session->open(sealed.data(), sealed.size(), plain)
              || plain != bytes)
            rw::fuzz::fail("a shell could not open what its own door sealed");
        }
        break;
      default: break;
    }
  }
  return 0;
}
