// rw-fuzz-seeds DIR: writes the seed corpora of the fuzz targets, DIR/<target>/<seed>:
// the messages and frames a worker and a node exchange in a session (a hello for a
// two-tensor Adam job under SSP, the welcome of a three-node job, a challenge and its
// proof, attach, the error that moves a worker, located, reroute, a hyper-parameter change,
// a fabric offer and placement), built with the same encoders the peers use. The TOML
// and Lua seeds are files in tests/fuzz/seeds (tests/fuzz/run.sh adds them).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "actors/door/requests.hpp"
#include "protocol/control.hpp"
#include "protocol/frame.hpp"
#include "protocol/half.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace fs = std::filesystem;
namespace pr = rw::protocol;

namespace {

void write(const fs::path& dir, const std::string& target, const std::string& name,
           const void* data, size_t size) {
  fs::create_directories(dir / target);
  std::ofstream out{dir / target / name, std::ios::binary};
  out.write(static_cast<const char*>(data), std::streamsize(size));
  if (!out)
    rw::fuzz::fail("cannot write seed " + (dir / target / name).string());
}

void write(const fs::path& dir, const std::string& target, const std::string& name,
           const pr::bytes& b) {
  write(dir, target, name, b.data(), b.size());
}

rw::job_spec session_job() {
  rw::job_spec spec;
  spec.name = "resnet-a";
  spec.num_workers = 4;
  spec.chunk_bytes = 1 << 20;
  spec.optimizer.kind = rw::optimizer_kind::adam;
  spec.optimizer.learning_rate = 0.001f;
  spec.tensors = {{"conv1.weight", 9408, true}, {"fc.bias", 1000, false}};
  spec.consistency.model = rw::consistency_spec::ssp;
  spec.consistency.staleness = 2;
  rw::hyper_change c;
  c.at_clock = 40;
  c.learning_rate = 0.0005f;
  spec.schedule.push_back(c);
  return spec;
}

void frames(const fs::path& dir) {
  auto header = [&](const std::string& name, pr::frame_kind kind, uint16_t flags,
                    uint32_t payload) {
    pr::frame_header h;
    h.kind = kind;
    h.flags = flags;
    h.job_id = 7;
    h.rank = 2;
    h.tensor_id = 1;
    h.chunk_index = 3;
    h.payload_bytes = payload;
    h.clock = 12;
    h.ring = 1;
    alignas(8) std::byte out[pr::frame_header_bytes];
    pr::encode(h, out);
    write(dir, "fuzz_frame_header", name, out, sizeof out);
  };
  header("push", pr::frame_kind::push, pr::flag_want_result, 4096);
  header("pull", pr::frame_kind::pull, pr::flag_only_changed | pr::flag_subscribe, 0);
  header("update", pr::frame_kind::update, 0, 4096);
  header("sparse", pr::frame_kind::push_sparse, 0, 64);
  header("hello", pr::frame_kind::hello, 0, 512);
  header("bye", pr::frame_kind::bye, 0, 0);
}

void sparse(const fs::path& dir) {
  // Length 1024 (two bytes: length - 1), then pairs.
  std::vector<unsigned char> in{0xff, 0x03};
  for (uint32_t i : {0u, 5u, 5u, 1023u}) {
    pr::sparse_pair p{i, 0.25f * float(i)};
    auto* b = reinterpret_cast<const unsigned char*>(&p);
    in.insert(in.end(), b, b + sizeof p);
  }
  write(dir, "fuzz_sparse", "four_pairs", in.data(), in.size());
  write(dir, "fuzz_sparse", "empty", in.data(), 2);
}

void half(const fs::path& dir) {
  // Flags (bit 0 bf16, bit 1 fp16), length - 1 in two bytes, then a chunk as a worker
  // of a bf16 or fp16 job sends it.
  std::vector<float> grad(1000);
  for (size_t i = 0; i < grad.size(); ++i)
    grad[i] = 0.001f * float(i) - 0.3f;
  for (auto [bit, flag, name] : {std::tuple{1, pr::flag_bf16, "bf16_chunk"},
                                 std::tuple{2, pr::flag_fp16, "fp16_chunk"}}) {
    std::vector<std::byte> payload(pr::half_payload_bytes(flag, grad.size()));
    pr::narrow_half(flag, grad.data(), grad.size(), payload.data());
    std::vector<unsigned char> in{static_cast<unsigned char>(bit), 0xe7, 0x03}; // 1000
    auto* b = reinterpret_cast<const unsigned char*>(payload.data());
    in.insert(in.end(), b, b + payload.size());
    write(dir, "fuzz_half", name, in.data(), in.size());
  }
}

void control(const fs::path& dir) {
  pr::hello_msg hello;
  hello.spec = session_job();
  hello.rank = 2;
  hello.shm_segment = "/rw-4242-7";
  hello.shm_nonce = 99;
  hello.has_token = true;
  hello.rack = "a";
  write(dir, "fuzz_hello", "worker", pr::encode(hello));
  hello.spec.tensors.clear();
  hello.spec_from_job = true;
  hello.mirror = true;
  write(dir, "fuzz_hello", "by_name", pr::encode(hello));

  pr::welcome_msg w;
  w.job_id = 7;
  w.node_name = "n1";
  w.created = true;
  w.endpoints = {"10.0.0.1:7100", "10.0.1.1:7100"};
  w.num_shards = 2;
  w.shard_endpoints = {{0}, {1}};
  w.token = 0x1234;
  w.shm = true;
  w.shm_handover = "@rackweave-1-0123456789abcdef";
  w.shm_ticket = std::string(32, 'T');
  w.job_nodes = {"10.0.0.1:7100", "10.0.0.2:7100", "10.0.0.3:7100"};
  w.job_node_names = {"n0", "n1", "n2"};
  w.node_index = 1;
  w.ring_vnodes = 64;
  w.ring_version = 3;
  w.resume_clock = 40;
  w.replicas = 1;
  w.spec = session_job();
  w.fabric = "tcp";
  write(dir, "fuzz_welcome", "three_nodes", pr::encode(w));

  pr::challenge_msg ch;
  ch.nonce.assign(32, std::byte{0x5a});
  write(dir, "fuzz_challenge", "nonce", pr::encode(ch));
  pr::proof_msg pr;
  pr.mac.assign(32, std::byte{0xa5});
  write(dir, "fuzz_proof", "mac", pr::encode(pr));
  pr::attach_msg at;
  at.nonce.assign(32, std::byte{0x3c});
  at.mac.assign(32, std::byte{0xc3});
  write(dir, "fuzz_attach", "proof", pr::encode(at));

  pr::error_msg e;
  e.code = rw::errc::moved;
  e.message = "job 'resnet-a' runs on n2";
  e.candidates = {"10.0.0.3:7100"};
  write(dir, "fuzz_error", "moved", pr::encode(e));

  pr::located_msg l{"10.0.0.9:7000", "n1", "rack-agg"};
  write(dir, "fuzz_located", "coordinator", pr::encode(l));

  pr::reroute_msg r;
  r.ring_version = 4;
  r.nodes = {"n0", "n2"};
  r.replicas = 1;
  r.addresses = {"10.0.0.1:7100", "10.0.0.3:7100"};
  write(dir, "fuzz_reroute", "two_nodes", pr::encode(r));
  r.replicas = 0;
  r.kept_pushes = true; // a takeover's
  write(dir, "fuzz_reroute", "takeover", pr::encode(r));

  rw::hyper_change hc;
  hc.at_clock = 100;
  hc.learning_rate = 0.1f;
  hc.beta2 = 0.99f;
  write(dir, "fuzz_hyper", "lr_beta2", pr::encode(hc));

  pr::fabric_offer fo;
  fo.provider = "tcp;ofi_rxm";
  fo.address.assign(16, std::byte{0x11});
  fo.slots_address = 0x7f0000001000;
  fo.slots_key = 42;
  fo.slot_bytes = 1 << 20;
  fo.slot_count = 64;
  fo.credit_batch = 32;
  fo.frame_notices = true;
  write(dir, "fuzz_fabric_offer", "tcp", pr::encode(fo));

  pr::fabric_place fp{1, 0x7f0000200000, 43, 4000, 1 << 20};
  write(dir, "fuzz_fabric_place", "tensor1", pr::encode(fp));
}

} // namespace

// fuzz_locator's scripts: [op][length LE16][bytes], op's low bits a connection.
void locator(const fs::path& dir) {
  auto frame = [](pr::frame_kind kind, const pr::bytes& payload) {
    pr::frame_header h;
    h.kind = kind;
    h.payload_bytes = static_cast<uint32_t>(payload.size());
    std::string out(pr::frame_header_bytes, '\0');
    pr::encode(h, reinterpret_cast<std::byte*>(out.data()));
    out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
    return out;
  };
  auto hello_of = [&](const std::string& job, size_t pad) {
    pr::hello_msg h;
    h.spec = session_job();
    h.spec.name = job;
    h.picked_by = std::string(pad, 'p');
    return frame(pr::frame_kind::hello, pr::encode(h));
  };
  auto record = [](std::string& script, uint8_t op, const std::string& bytes) {
    script.push_back(char(op));
    script.push_back(char(bytes.size() & 0xff));
    script.push_back(char((bytes.size() >> 8) & 0xff));
    script += bytes;
  };
  // Two hellos in pieces, in turns, the second larger (it once resized the first's
  // buffer under it); then a locate on a third connection.
  auto a = hello_of("alpha", 3000), b = hello_of("bravo", 9000);
  std::string script;
  record(script, 0, a.substr(0, 1000));
  record(script, 1, b.substr(0, 5000));
  record(script, 8 | 1, b.substr(5000));
  record(script, 0, a.substr(1000));
  record(script, 2, frame(pr::frame_kind::locate, {}));
  write(dir, "fuzz_locator", "interleaved-hellos", script.data(), script.size());
  std::string closing;
  record(closing, 4 | 3, a.substr(0, 70));
  record(closing, 0, a);
  write(dir, "fuzz_locator", "closed-mid-hello", closing.data(), closing.size());
}

// fuzz_tenant_door's scripts: [op][length LE16][bytes]; op = connection | what << 2.
void tenant_door(const fs::path& dir) {
  auto record = [](std::string& script, uint8_t op, const std::string& bytes) {
    script.push_back(char(op));
    script.push_back(char(bytes.size() & 0xff));
    script.push_back(char((bytes.size() >> 8) & 0xff));
    script += bytes;
  };
  rw::actors::door::request r;
  r.id = 1;
  r.op = rw::actors::door::op::create;
  r.spec = session_job();
  auto create = rw::actors::door::encode(r);
  std::string request(reinterpret_cast<const char*>(create.data()), create.size());
  // Two shells open sessions in turns and ask; a third steals the first's frames; a
  // fourth uses a wrong secret; the doors answer.
  std::string script;
  record(script, 1 << 2 | 0, "");
  record(script, 1 << 2 | 1, "");
  record(script, 1 << 2 | 0, "");
  record(script, 1 << 2 | 1, "");
  record(script, 1 << 2 | 0, request);
  record(script, 3 << 2 | 2, std::string(1, '\0'));
  record(script, 2 << 2 | 3, "");
  record(script, 2 << 2 | 3, "");
  record(script, 1 << 2 | 1, request);
  record(script, 4 << 2 | 0, "an answer");
  write(dir, "fuzz_tenant_door", "two-sessions-a-thief", script.data(), script.size());
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rw-fuzz-seeds DIR\n");
    return 2;
  }
  fs::path dir{argv[1]};
  frames(dir);
  sparse(dir);
  half(dir);
  control(dir);
  locator(dir);
  tenant_door(dir);
  return 0;
}
