#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "protocol/control.hpp"
#include "protocol/frame.hpp"

namespace rw_unit_frame {

using namespace rw::protocol;

namespace {

frame_header sample() {
  frame_header h;
  h.kind = frame_kind::push;
  h.flags = flag_want_result;
  h.error_code = rw::errc::duplicate_push;
  h.job_id = 0xdeadbeef;
  h.rank = 1023;
  h.tensor_id = 7;
  h.chunk_index = 0xffffffff;
  h.payload_bytes = 32768;
  h.clock = 0x0123456789abcdefull;
  h.staleness = 7;
  return h;
}

} // namespace

TEST_CASE("a frame header survives encode and decode", "[frame]") {
  alignas(8) std::byte buf[frame_header_bytes];
  auto h = sample();
  encode(h, buf);
  frame_header d;
  std::string why;
  REQUIRE(decode(buf, d, why) == rw::errc::ok);
  CHECK(d.kind == h.kind);
  CHECK(d.flags == h.flags);
  CHECK(d.error_code == h.error_code);
  CHECK(d.job_id == h.job_id);
  CHECK(d.rank == h.rank);
  CHECK(d.tensor_id == h.tensor_id);
  CHECK(d.chunk_index == h.chunk_index);
  CHECK(d.payload_bytes == h.payload_bytes);
  CHECK(d.clock == h.clock);
  CHECK(d.staleness == h.staleness);
}

TEST_CASE("every header has the same size whatever its values", "[frame]") {
  // The segment table says one segment of (64 - 8) / 8 words for any field values.
  for (auto h : {frame_header{}, sample()}) {
    alignas(8) std::byte buf[frame_header_bytes + 8];
    std::memset(buf, 0xab, sizeof(buf));
    encode(h, buf);
    uint32_t table[2];
    std::memcpy(table, buf, sizeof(table));
    CHECK(table[0] == 0);
    CHECK(table[1] * 8 + 8 == frame_header_bytes);
    CHECK(buf[frame_header_bytes] == std::byte{0xab}); // nothing written past the end
  }
}

TEST_CASE("damaged headers are refused with the right code", "[frame]") {
  alignas(8) std::byte buf[frame_header_bytes];
  frame_header d;
  std::string why;

  encode(sample(), buf);
  buf[16] ^= std::byte{0xff}; // first byte of the data section: the magic
  CHECK(decode(buf, d, why) == rw::errc::bad_magic);
  CHECK_THAT(why, Catch::Contains("magic"));

  encode(sample(), buf);
  buf[20] ^= std::byte{0x01}; // the version field
  CHECK(decode(buf, d, why) == rw::errc::bad_version);

  encode(sample(), buf);
  buf[22] = std::byte{0x77}; // the kind field
  CHECK(decode(buf, d, why) == rw::errc::bad_frame);

  std::memset(buf, 0x41, sizeof(buf)); // text, not a frame
  CHECK(decode(buf, d, why) == rw::errc::bad_magic);
}

TEST_CASE("control messages round-trip and garbage is refused without throwing",
          "[frame]") {
  hello_msg h;
  h.rank = 3;
  h.spec.name = "job";
  h.spec.num_workers = 4;
  h.spec.chunk_bytes = 8192;
  h.spec.optimizer.kind = rw::optimizer_kind::adam;
  h.spec.optimizer.learning_rate = 0.125f;
  h.spec.tensors = {{"w", 12345, true}, {"b", 7, false}};
  auto bytes = encode(h);
  hello_msg d;
  std::string why;
  REQUIRE(decode(bytes.data(), bytes.size(), d, why) == rw::errc::ok);
  CHECK(d.rank == 3);
  CHECK(rw::describe_mismatch(h.spec, d.spec).empty());

  error_msg e{rw::errc::spec_mismatch, "nope", {}};
  auto eb = encode(e);
  error_msg ed;
  REQUIRE(decode(eb.data(), eb.size(), ed, why) == rw::errc::ok);
  CHECK(ed.code == rw::errc::spec_mismatch);
  CHECK(ed.message == "nope");
  CHECK(ed.candidates.empty());
  CHECK(d.rack.empty());
  CHECK(d.picked_by.empty());

  // A worker's rack option and why it chose the node; a moved answer's candidates.
  h.rack = "rack-b";
  h.picked_by = "lowest round trip 0.1 ms";
  auto placed = encode(h);
  REQUIRE(decode(placed.data(), placed.size(), d, why) == rw::errc::ok);
  CHECK(d.rack == "rack-b");
  CHECK(d.picked_by == "lowest round trip 0.1 ms");
  error_msg m{rw::errc::moved, "10.0.0.1:1 or another", {"10.0.0.1:1", "10.0.0.2:1"}};
  auto mb = encode(m);
  REQUIRE(decode(mb.data(), mb.size(), ed, why) == rw::errc::ok);
  CHECK(ed.candidates == m.candidates);

  // The compression travels in the hello and in the welcome's spec.
  h.spec.compression = rw::parse_compression("topk:0.05");
  auto topk = encode(h);
  REQUIRE(decode(topk.data(), topk.size(), d, why) == rw::errc::ok);
  CHECK(d.spec.compression.kind == rw::compression_spec::topk);
  CHECK(d.spec.compression.ratio == 0.05f);
  CHECK(d.spec.compression.warmup == 0);
  h.spec.compression = rw::parse_compression("topk:0.05,warmup=300");
  auto warm = encode(h);
  REQUIRE(decode(warm.data(), warm.size(), d, why) == rw::errc::ok);
  CHECK(d.spec.compression.warmup == 300);
  welcome_msg w;
  w.endpoints = {"127.0.0.1:1"};
  w.num_shards = 1;
  w.shard_endpoints = {{0}};
  w.spec = h.spec;
  w.spec.compression = rw::parse_compression("fp16");
  w.spec.compression.updates = true;
  auto wb = encode(w);
  welcome_msg wd;
  REQUIRE(decode(wb.data(), wb.size(), wd, why) == rw::errc::ok);
  CHECK(wd.spec.compression.kind == rw::compression_spec::fp16);
  CHECK(wd.spec.compression.updates);

  std::vector<std::byte> junk(64, std::byte{0xff});
  CHECK(decode(junk.data(), junk.size(), d, why) == rw::errc::bad_frame);
  CHECK(decode(bytes.data(), bytes.size() - 8, d, why) == rw::errc::bad_frame);
  CHECK(decode(bytes.data(), 3, d, why) == rw::errc::bad_frame);
}

TEST_CASE("the credential and locate messages round-trip", "[frame]") {
  std::string why;
  hello_msg h;
  h.spec.name = "job";
  h.has_token = true;
  auto hb = encode(h);
  hello_msg hd;
  REQUIRE(decode(hb.data(), hb.size(), hd, why) == rw::errc::ok);
  CHECK(hd.has_token);

  challenge_msg c{std::vector<std::byte>(32, std::byte{7})};
  auto cb = encode(c);
  challenge_msg cd;
  REQUIRE(decode(cb.data(), cb.size(), cd, why) == rw::errc::ok);
  CHECK(cd.nonce == c.nonce);

  proof_msg p{std::vector<std::byte>(32, std::byte{9})};
  auto pb = encode(p);
  proof_msg pd;
  REQUIRE(decode(pb.data(), pb.size(), pd, why) == rw::errc::ok);
  CHECK(pd.mac == p.mac);

  located_msg l{"10.0.0.1:7601", "rack-a", "rack-agg", "10.0.0.1:7609"};
  auto lb = encode(l);
  located_msg ld;
  REQUIRE(decode(lb.data(), lb.size(), ld, why) == rw::errc::ok);
  CHECK(ld.coordinator == l.coordinator);
  CHECK(ld.node_name == "rack-a");
  CHECK(ld.role == "rack-agg");
  CHECK(ld.tenant_door == l.tenant_door);

  frame_header f;
  f.kind = rw::protocol::frame_kind::located;
  alignas(8) std::byte buf[rw::protocol::frame_header_bytes];
  encode(f, buf);
  frame_header fd;
  REQUIRE(decode(buf, fd, why) == rw::errc::ok);
  CHECK(fd.kind == rw::protocol::frame_kind::located);
}

TEST_CASE("a reroute carries its ring, nodes, addresses and whether the node kept the "
          "pushes the ring before routed to it",
          "[frame]") {
  using rw::protocol::reroute_msg;
  std::string why;
  reroute_msg r{3, {"n0", "n2"}, 0, {"127.0.0.1:7100", "127.0.0.1:7102"}};
  r.kept_pushes = true; // a takeover's
  auto b = encode(r);
  reroute_msg d;
  REQUIRE(decode(b.data(), b.size(), d, why) == rw::errc::ok);
  CHECK(d.ring_version == 3);
  CHECK(d.nodes == r.nodes);
  CHECK(d.addresses == r.addresses);
  CHECK(d.replicas == 0);
  CHECK(d.kept_pushes);
  // A move's (and an older node's, which never sets the field): every request again.
  r.kept_pushes = false;
  b = encode(r);
  REQUIRE(decode(b.data(), b.size(), d, why) == rw::errc::ok);
  CHECK_FALSE(d.kept_pushes);
}

TEST_CASE("a control message that lists more than its bytes can hold is refused",
          "[frame]") {
  // Found by tests/fuzz/fuzz_welcome: 568 bytes whose tensor list claims 434176
  // zero-size elements, which decoded into as many tensor specs (an amplification: a
  // hello of that shape would have cost the node 20 MB before any authentication).
  std::ifstream in{std::string(RW_SOURCE_DIR)
                     + "/tests/fuzz/seeds/fuzz_welcome/amplified-tensors",
                   std::ios::binary};
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(bytes.size() == 568);
  std::string why;
  rw::protocol::welcome_msg w;
  CHECK(rw::protocol::decode(reinterpret_cast<const std::byte*>(bytes.data()),
                             bytes.size(), w, why)
        == rw::errc::bad_frame);
  CHECK_THAT(why, Catch::Contains("traversal limit"));
  rw::protocol::hello_msg h;
  CHECK(rw::protocol::decode(reinterpret_cast<const std::byte*>(bytes.data()),
                             bytes.size(), h, why)
        == rw::errc::bad_frame);
  // A real welcome still decodes: its reader reads each word once.
  rw::protocol::welcome_msg real;
  real.node_name = "n1";
  real.endpoints = {"10.0.0.1:7100"};
  real.shard_endpoints = {{0}};
  real.spec.name = "big";
  for (uint32_t i = 0; i < 2000; ++i)
    real.spec.tensors.push_back({"layer" + std::to_string(i), 1024, i % 2 == 0});
  auto enc = rw::protocol::encode(real);
  rw::protocol::welcome_msg back;
  REQUIRE(rw::protocol::decode(enc.data(), enc.size(), back, why) == rw::errc::ok);
  CHECK(back.spec.tensors.size() == 2000);
}

TEST_CASE("a CAF middleman's handshake is named as a control port, not garbage",
          "[frame]") {
  // The first 64 bytes rw-node's control port sends a client (CAF 0.17.6, captured).
  const char* hex =
    "000000000000058e00000000000000030000000000000000000000000000000000003e9aab9bac7900"
    "002866bffadf3ac9f1142f6446ca706c9bb0f69b114400010f67656e657269";
  alignas(8) std::byte in[rw::protocol::frame_header_bytes];
  for (size_t i = 0; i < sizeof(in); ++i)
    in[i] = static_cast<std::byte>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  CHECK(rw::protocol::looks_like_caf_handshake(in));
  rw::protocol::frame_header h;
  std::string why;
  CHECK(rw::protocol::decode(in, h, why) == rw::errc::bad_magic);
  CHECK_THAT(why, Catch::Contains("control port") && Catch::Contains("--listen"));
  // A RackWeave header, and other garbage, are not taken for one.
  rw::protocol::frame_header real;
  alignas(8) std::byte ours[rw::protocol::frame_header_bytes];
  rw::protocol::encode(real, ours);
  CHECK_FALSE(rw::protocol::looks_like_caf_handshake(ours));
  std::memset(in, 0xab, sizeof(in));
  CHECK_FALSE(rw::protocol::looks_like_caf_handshake(in));
  why.clear();
  CHECK(rw::protocol::decode(in, h, why) == rw::errc::bad_magic);
  CHECK_THAT(why, Catch::Contains("not a RackWeave peer"));
}

} // namespace rw_unit_frame
