// The tenant door's protocol without sockets: the handshake's proofs both ways
// (protocol/tenant_door.hpp), its sealed frames, and the requests a tenant may make
// (actors/door/requests.hpp).

#include <random>

#include <catch2/catch.hpp>

#include "actors/door/requests.hpp"
#include "protocol/tenant_door.hpp"

namespace rw_unit_tenant_door {

using namespace rw::protocol::door;
using rw::errc;

namespace {

const std::string vision_secret = "vision-secret-0123456789";

server_handshake::secret_lookup tenants() {
  return [](const std::string& t) -> std::optional<std::string> {
    if (t == "vision")
      return vision_secret;
    if (t == "speech")
      return std::string("speech-secret-0123456789");
    return std::nullopt;
  };
}

struct opened {
  std::unique_ptr<channel> shell;
  server_handshake door{tenants()};
  errc code = errc::ok;
  std::string why;
  std::string refused; // what the door logged
};

// Runs the handshake for `tenant` with `secret` against a door that knows vision and
// speech.
std::unique_ptr<opened> handshake(const std::string& tenant, const std::string& secret) {
  auto out = std::make_unique<opened>();
  client_handshake shell{tenant, secret};
  auto step = out->door.on_frame(shell.hello());
  REQUIRE_FALSE(step.close);
  bytes proof;
  out->code = shell.on_challenge(step.reply, proof, out->why);
  REQUIRE(out->code == errc::ok);
  step = out->door.on_frame(proof);
  out->refused = step.refused;
  out->code = shell.on_welcome(step.reply, out->why);
  if (out->code == errc::ok)
    out->shell = shell.take_session();
  return out;
}

bytes text(const std::string& s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return bytes(p, p + s.size());
}

} // namespace

TEST_CASE("the tenant door: both sides prove the tenant's secret, then frames are sealed",
          "[tenant_door]") {
  auto s = handshake("vision", vision_secret);
  REQUIRE(s->code == errc::ok);
  REQUIRE(s->door.open());
  CHECK(s->door.tenant() == "vision");
  auto& door = s->door.session();
  auto& shell = *s->shell;

  auto a = text("nodes, please");
  auto sealed = shell.seal(a.data(), a.size());
  CHECK(sealed.size() == a.size() + seal_bytes);
  bytes plain;
  REQUIRE(door.open(sealed.data(), sealed.size(), plain));
  CHECK(plain == a);
  auto b = text("here they are");
  auto back = door.seal(b.data(), b.size());
  REQUIRE(shell.open(back.data(), back.size(), plain));
  CHECK(plain == b);

  SECTION("a frame replayed does not open") {
    CHECK_FALSE(door.open(sealed.data(), sealed.size(), plain));
  }
  SECTION("an altered frame does not open") {
    auto next = shell.seal(a.data(), a.size());
    next[3] ^= std::byte{1};
    CHECK_FALSE(door.open(next.data(), next.size(), plain));
  }
  SECTION("frames out of order do not open") {
    auto first = shell.seal(a.data(), a.size());
    auto second = shell.seal(b.data(), b.size());
    CHECK_FALSE(door.open(second.data(), second.size(), plain));
    (void)first;
  }
  SECTION("a frame sealed for the other direction does not open") {
    auto mine = door.seal(b.data(), b.size());
    CHECK_FALSE(door.open(mine.data(), mine.size(), plain));
  }
  SECTION("a handshake frame after the handshake is refused") {
    client_handshake again{"vision", vision_secret};
    auto step = s->door.on_frame(again.hello());
    CHECK(step.close);
  }
}

TEST_CASE("the tenant door refuses a wrong secret and an unknown tenant alike",
          "[tenant_door]") {
  auto wrong = handshake("vision", "not-the-secret-0123456789");
  CHECK(wrong->code == errc::unauthorized);
  CHECK_THAT(wrong->why, Catch::Contains("tenant 'vision' and this secret do not match"));
  CHECK_FALSE(wrong->door.open());
  CHECK_FALSE(wrong->refused.empty());

  auto other = handshake("speech", vision_secret); // another tenant's secret
  CHECK(other->code == errc::unauthorized);

  auto unknown = handshake("audio", vision_secret);
  CHECK(unknown->code == errc::unauthorized);
  CHECK_THAT(unknown->why,
             Catch::Contains("tenant 'audio' and this secret do not match"));
}

TEST_CASE(
  "a shell checks the door's proof: a door without the tenant's secret is no door",
  "[tenant_door]") {
  client_handshake shell{"vision", vision_secret};
  // A door that knows another secret for vision: it refuses the shell's proof...
  server_handshake fake{[](const std::string&) -> std::optional<std::string> {
    return std::string("someone-else-0123456789");
  }};
  auto step = fake.on_frame(shell.hello());
  bytes proof;
  std::string why;
  REQUIRE(shell.on_challenge(step.reply, proof, why) == errc::ok);
  // ...and a welcome it makes up (any proof, any header) is refused by the shell.
  bytes welcome{std::byte{4}};
  welcome.resize(1 + proof_bytes + header_bytes, std::byte{7});
  CHECK(shell.on_welcome(welcome, why) == errc::unauthorized);
  CHECK_THAT(why, Catch::Contains("not the cluster's coordinator"));
  CHECK(shell.take_session() == nullptr);
}

TEST_CASE("the tenant door refuses malformed handshakes", "[tenant_door]") {
  client_handshake shell{"vision", vision_secret};
  auto hello = shell.hello();
  auto refused = [](bytes body) {
    server_handshake door{tenants()};
    auto step = door.on_frame(body);
    errc code = errc::ok;
    std::string why;
    REQUIRE(step.close);
    REQUIRE(read_refusal(step.reply, code, why));
    return std::pair{code, why};
  };
  auto bad_version = hello;
  bad_version[1] = std::byte{9};
  CHECK(refused(bad_version).first == errc::bad_version);
  auto short_hello = hello;
  short_hello.pop_back();
  CHECK(refused(short_hello).first == errc::bad_frame);
  auto long_hello = hello;
  long_hello.push_back(std::byte{0});
  CHECK(refused(long_hello).first == errc::bad_frame);
  CHECK(refused(bytes{std::byte{3}}).first == errc::bad_frame); // a proof first
  CHECK(refused(bytes{}).first == errc::bad_frame);
  client_handshake bad_name{"Vision:x", vision_secret};
  CHECK(refused(bad_name.hello()).first == errc::bad_frame);

  SECTION("a proof of the wrong length") {
    server_handshake door{tenants()};
    auto step = door.on_frame(hello);
    bytes proof;
    std::string why;
    REQUIRE(shell.on_challenge(step.reply, proof, why) == errc::ok);
    proof.pop_back();
    step = door.on_frame(proof);
    CHECK(step.close);
    CHECK_FALSE(door.open());
  }
  SECTION("random bytes at every step never open a session") {
    std::mt19937 rng{59};
    for (int i = 0; i < 2000; ++i) {
      server_handshake door{tenants()};
      for (int k = 0; k < 3 && !door.open(); ++k) {
        bytes body(rng() % 80);
        for (auto& x : body)
          x = static_cast<std::byte>(rng());
        if (!body.empty() && i % 2 == 0)
          body[0] = static_cast<std::byte>(1 + k * 2); // the kind it waits for
        if (door.on_frame(body).close)
          break;
      }
      CHECK_FALSE(door.open());
    }
  }
}

TEST_CASE("a refusal says its code and reason, cut to 1 KiB", "[tenant_door]") {
  errc code = errc::ok;
  std::string why;
  REQUIRE(read_refusal(refusal(errc::too_many_requests, "busy"), code, why));
  CHECK(code == errc::too_many_requests);
  CHECK(why == "busy");
  REQUIRE(read_refusal(refusal(errc::internal, std::string(5000, 'x')), code, why));
  CHECK(why.size() == 1024);
  CHECK_FALSE(read_refusal(bytes{std::byte{4}, std::byte{0}, std::byte{1}}, code, why));
}

TEST_CASE("frames: a 4-byte big-endian length, then the body", "[tenant_door]") {
  auto f = framed(text("abc"));
  REQUIRE(f.size() == 7);
  std::byte h[4] = {f[0], f[1], f[2], f[3]};
  CHECK(frame_length(h) == 3);
  std::byte big[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  CHECK(frame_length(big) == 0x01020304u);
}

TEST_CASE("door requests: the ops a tenant may make, exactly their arguments",
          "[tenant_door]") {
  namespace door = rw::actors::door;
  door::request r;
  r.id = 77;
  r.op = door::op::create;
  r.spec.name = "m";
  r.spec.num_workers = 2;
  r.placement.memory = 8u << 20;
  r.placement.nodes = {"rack-a"};
  auto encoded = door::encode(r);
  door::request back;
  std::string why;
  REQUIRE(door::decode(encoded, back, why) == errc::ok);
  CHECK(back.id == 77);
  CHECK(back.op == door::op::create);
  CHECK(back.spec.name == "m");
  CHECK(back.spec.num_workers == 2);
  CHECK(back.placement.memory == (8u << 20));
  CHECK(back.placement.nodes == std::vector<std::string>{"rack-a"});

  for (auto op : {door::op::status, door::op::stop, door::op::remove}) {
    door::request x;
    x.op = op;
    x.name = "vision:m";
    REQUIRE(door::decode(door::encode(x), back, why) == errc::ok);
    CHECK(back.op == op);
    CHECK(back.name == "vision:m");
  }
  door::request set;
  set.op = door::op::set;
  set.name = "m";
  set.change.at_clock = 5;
  set.change.learning_rate = 0.5f;
  REQUIRE(door::decode(door::encode(set), back, why) == errc::ok);
  CHECK(back.change.at_clock == 5);
  REQUIRE(back.change.learning_rate);
  CHECK(*back.change.learning_rate == 0.5f);

  SECTION("anything else is refused") {
    auto drain = door::encode(set);
    drain[4] = std::byte{9};
    CHECK(door::decode(drain, back, why) == errc::unauthorized);
    CHECK_THAT(why, Catch::Contains("not a request a tenant can make"));
    auto trailing = encoded;
    trailing.push_back(std::byte{0});
    CHECK(door::decode(trailing, back, why) == errc::bad_frame);
    auto cut = encoded;
    cut.resize(cut.size() - 3);
    CHECK(door::decode(cut, back, why) == errc::bad_frame);
    door::request nodes;
    nodes.op = door::op::nodes;
    auto with_args = door::encode(nodes);
    with_args.push_back(std::byte{1});
    CHECK(door::decode(with_args, back, why) == errc::bad_frame);
    CHECK(door::decode(bytes(3), back, why) == errc::bad_frame);
  }
  SECTION("random bytes never crash the decoder") {
    std::mt19937 rng{63};
    for (int i = 0; i < 5000; ++i) {
      auto x = encoded;
      for (int k = 0; k < 4; ++k)
        x[rng() % x.size()] = static_cast<std::byte>(rng());
      if (i % 3 == 0)
        x.resize(rng() % x.size());
      (void)door::decode(x, back, why);
    }
  }
}

TEST_CASE("door replies: an answer or a refusal, for the request's id", "[tenant_door]") {
  namespace door = rw::actors::door;
  std::vector<rw::actors::node_info> nodes(2);
  nodes[1].name = "rack-b";
  door::reply r;
  REQUIRE(door::decode(door::encode_answer(5, nodes), r));
  CHECK(r.id == 5);
  CHECK(r.code == errc::ok);
  std::vector<rw::actors::node_info> got;
  REQUIRE(door::decode_answer(r.answer, got));
  CHECK(got.size() == 2);
  CHECK(got[1].name == "rack-b");
  uint64_t clock = 0;
  CHECK_FALSE(door::decode_answer(r.answer, clock));

  REQUIRE(
    door::decode(door::encode_refusal(6, errc::unknown_job, "no job named 'x'"), r));
  CHECK(r.id == 6);
  CHECK(r.code == errc::unknown_job);
  CHECK(r.reason == "no job named 'x'");
  REQUIRE(door::decode(door::encode_answer(7), r));
  CHECK(r.answer.empty());
  CHECK_FALSE(door::decode(bytes(4), r));
}

} // namespace rw_unit_tenant_door
