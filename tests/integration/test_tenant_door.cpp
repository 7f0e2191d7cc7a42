// The tenant door (issue 59, finding 1 for tenants): tenants never speak BASP. Before,
// the coordinator admitted certificates derived from each tenant's secret on its
// control port, so a tenant's process could send BASP messages naming the
// coordinator's own node as their source and be heard as an operator. Now the control
// port takes only the cluster CA, and a tenant speaks to the door: a mutual proof of
// its secret, sealed frames, and seven ops. Hostile clients here use the protocol's own
// classes over raw sockets. Every wait is bounded; nodes are stopped by PID.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/cluster_messages.hpp"
#include "actors/door/requests.hpp"
#include "actors/links/cluster_connect.hpp"
#include "actors/node/caf_peer_sweep.hpp"
#include "actors/node/control_tls.hpp"
#include "protocol/tenant_door.hpp"
#include "runtime/control_certs.hpp"
#include "tests/support/cluster_fixture.hpp"

namespace rw_integration_tenant_door {

using namespace rw;
using namespace std::chrono_literals;
using protocol::door::bytes;

namespace {

const std::string cluster_secret = "the-cluster-secret-0123456789";
const std::string vision_secret = "vision-team-secret-0123456789";

struct files {
  std::string dir = testing::scratch_dir("tenant-door");
  std::string cluster = write("cluster.secret", cluster_secret);
  std::string vision = write("vision.secret", vision_secret);
  std::string tenants = write("tenants.toml",
                              "[vision]\nsecret_file = 'vision.secret'\n");
  ~files() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    auto path = dir + "/" + name;
    std::ofstream{path} << text << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_read
                                         | std::filesystem::perms::owner_write);
    return path;
  }
};

// A port from the coordinator's start line ("... KEY=HOST:PORT ...").
uint16_t port_in_log(testing::node_process& node, const std::string& key) {
  REQUIRE(node.wait_for_log("cluster coordinator up:", 10s));
  auto log = node.log();
  auto at = log.find(key + "=", log.find("cluster coordinator up:"));
  REQUIRE(at != std::string::npos);
  auto end = log.find_first_of(" \n", at);
  auto field = log.substr(at, end - at);
  return static_cast<uint16_t>(std::stoi(field.substr(field.rfind(':') + 1)));
}

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
  return fd;
}

void send_frame(int fd, const bytes& body) {
  auto f = protocol::door::framed(body);
  REQUIRE(::send(fd, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size()));
}

// One frame's body within `wait`; nothing if the door closed or said nothing.
std::optional<bytes> read_frame(int fd, std::chrono::milliseconds wait = 10s) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  auto take = [&](std::byte* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return false;
      auto r = ::recv(fd, out + got, n - got, 0);
      if (r <= 0)
        return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  std::byte h[4];
  if (!take(h, 4))
    return std::nullopt;
  bytes body(protocol::door::frame_length(h));
  if (body.size() > (1u << 24) || !take(body.data(), body.size()))
    return std::nullopt;
  return body;
}

bool closed_within(int fd, std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0)
      return true;
  }
}

// A session at the door as tenant vision, by hand.
struct session {
  int fd = -1;
  std::unique_ptr<protocol::door::channel> channel;
  ~session() {
    if (fd >= 0)
      ::close(fd);
  }
};

std::unique_ptr<session> open_session(uint16_t door, const std::string& secret,
                                      errc& code, std::string& why) {
  auto s = std::make_unique<session>();
  s->fd = connect_to(door);
  protocol::door::client_handshake hs{"vision", secret};
  send_frame(s->fd, hs.hello());
  auto challenge = read_frame(s->fd);
  REQUIRE(challenge);
  bytes proof;
  code = hs.on_challenge(*challenge, proof, why);
  REQUIRE(code == errc::ok);
  send_frame(s->fd, proof);
  auto welcome = read_frame(s->fd);
  REQUIRE(welcome);
  code = hs.on_welcome(*welcome, why);
  s->channel = hs.take_session();
  return s;
}

actors::door::reply ask(session& s, const bytes& plain) {
  send_frame(s.fd, s.channel->seal(plain.data(), plain.size()));
  auto sealed = read_frame(s.fd);
  REQUIRE(sealed);
  bytes answer;
  REQUIRE(s.channel->open(sealed->data(), sealed->size(), answer));
  actors::door::reply r;
  REQUIRE(actors::door::decode(answer, r));
  return r;
}

} // namespace

TEST_CASE("a tenant's certificate no longer opens the control port",
          "[integration][cluster][tenants][hostile]") {
  files f;
  testing::node_process coord{{"--name", "coord", "--control", "127.0.0.1:0",
                               "--cluster-secret-file", f.cluster, "--tenants-file",
                               f.tenants},
                              {"coordinator", false, {}}};
  REQUIRE(coord.wait_for_log("tenant-door=127.0.0.1:", 10s));
  // What a tenant's shell held before: a certificate of its tenant's derived CA (the
  // coordinator trusted those), trusting the cluster's CA (the located answer gave it).
  auto me = runtime::derived_identity(vision_secret, "tenant vision", "a tenant's shell");
  auto cluster_ca = runtime::derived_ca_cert(cluster_secret, runtime::cluster_scope);
  auto cert = f.write("tenant.pem", me.cert);
  auto key = f.write("tenant.key", me.key);
  auto ca = f.write("ca.pem", cluster_ca + me.ca);
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  actors::configure_control_tls(cfg, actors::tls_files{cert, key, ca});
  cfg.set("logger.verbosity", caf::atom("quiet"));
  {
    caf::actor_system sys{cfg};
    auto contact = actors::reach_coordinator(sys, coord.address(), 5s);
    CHECK_FALSE(contact.coordinator); // before: connected, and could speak BASP
    INFO(contact.error);
    CHECK_THAT(contact.error, Catch::Contains("does not answer")
                                || Catch::Contains("refused the TLS handshake"));
    actors::detail::stop_peer_helpers(sys);
  }
  CHECK(coord.wait_for_log("control plane: TLS handshake failed: peer=127.0.0.1:"));
}

TEST_CASE("the tenant door takes the seven ops of a proven tenant, and nothing else",
          "[integration][cluster][tenants][hostile]") {
  files f;
  testing::cluster c{{"--cluster-secret-file", f.cluster, "--tenants-file", f.tenants},
                     {"--cluster-secret-file", f.cluster}};
  auto door = port_in_log(c.coordinator(), "tenant-door");

  errc code = errc::ok;
  std::string why;
  // A wrong secret: refused before any request, and logged.
  {
    auto wrong = open_session(door, "not-vision-secret-0123456789", code, why);
    CHECK(code == errc::unauthorized);
    CHECK_THAT(why, Catch::Contains("do not match"));
    CHECK(closed_within(wrong->fd, 5s));
    CHECK(c.coordinator().wait_for_log("tenant door: 127.0.0.1:"));
  }
  auto s = open_session(door, vision_secret, code, why);
  REQUIRE(code == errc::ok);
  CHECK(c.coordinator().wait_for_log("tenant door: tenant 'vision' proved its secret"));

  // An op a tenant may make: answered, for its own namespace.
  actors::door::request create;
  create.id = 1;
  create.op = actors::door::op::create;
  create.spec.name = "m";
  create.spec.num_workers = 1;
  create.spec.chunk_bytes = 4096;
  create.spec.optimizer.kind = optimizer_kind::sum;
  auto made = ask(*s, actors::door::encode(create));
  INFO(made.reason);
  REQUIRE(made.code == errc::ok);
  actors::job_created job;
  REQUIRE(actors::door::decode_answer(made.answer, job));
  CHECK(job.job.name == "vision:m");
  CHECK(c.coordinator().wait_for_log("by tenant 'vision' at 127.0.0.1:"));

  // Anything else (a drain's op number, say): refused, logged, the session goes on.
  auto drain = actors::door::encode(create);
  drain[4] = std::byte{9};
  auto refused = ask(*s, drain);
  CHECK(refused.code == errc::unauthorized);
  CHECK_THAT(refused.reason, Catch::Contains("not a request a tenant can make"));
  CHECK(c.coordinator().wait_for_log("not a request a tenant can make"));
  actors::door::request jobs;
  jobs.id = 3;
  jobs.op = actors::door::op::jobs;
  auto listed = ask(*s, actors::door::encode(jobs));
  REQUIRE(listed.code == errc::ok);
  std::vector<actors::job_report> reports;
  REQUIRE(actors::door::decode_answer(listed.answer, reports));
  CHECK(reports.size() == 1);

  // A frame that does not open with the session's key ends the session.
  auto forged = s->channel->seal(drain.data(), drain.size());
  forged[2] ^= std::byte{1};
  send_frame(s->fd, forged);
  CHECK(closed_within(s->fd, 5s));

  // Two requests without waiting for the first answer (in one segment: the door reads
  // both before the coordinator can answer) end the session.
  auto t = open_session(door, vision_secret, code, why);
  REQUIRE(code == errc::ok);
  auto plain = actors::door::encode(jobs);
  auto two = protocol::door::framed(t->channel->seal(plain.data(), plain.size()));
  auto second = protocol::door::framed(t->channel->seal(plain.data(), plain.size()));
  two.insert(two.end(), second.begin(), second.end());
  REQUIRE(::send(t->fd, two.data(), two.size(), MSG_NOSIGNAL)
          == static_cast<ssize_t>(two.size()));
  CHECK(closed_within(t->fd, 5s));

  // The operator still sees the job over the middleman.
  auto op = testing::run_shell({"--connect", c.a().address(), "--cluster-secret-file",
                                f.cluster, "-c",
                                "print(rw.job_status('vision:m').state)"});
  INFO(op.err);
  CHECK(op.out == "created\n");
}

TEST_CASE("the tenant door bounds strangers: frame sizes, handshake time, per host",
          "[integration][cluster][tenants][hostile]") {
  files f;
  testing::node_process coord{{"--name", "coord", "--control", "127.0.0.1:0",
                               "--cluster-secret-file", f.cluster, "--tenants-file",
                               f.tenants},
                              {"coordinator", false, {}}};
  auto door = port_in_log(coord, "tenant-door");
  // A frame announced past the handshake's bound: closed at once, nothing read.
  int big = connect_to(door);
  std::byte h[4] = {std::byte{0}, std::byte{0x10}, std::byte{0}, std::byte{0}}; // 1 MiB
  REQUIRE(::send(big, h, 4, MSG_NOSIGNAL) == 4);
  CHECK(closed_within(big, 3s));
  ::close(big);
  CHECK(coord.wait_for_log("before the proof): closed"));

  // Strangers from one host: 16 held, the 17th closed at once; those that say
  // nothing are closed when their handshake time (5 s) runs out.
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i)
    idle.push_back(connect_to(door));
  int extra = connect_to(door);
  CHECK(closed_within(extra, 3s));
  ::close(extra);
  CHECK(coord.wait_for_log("closed at once"));
  for (int fd : idle) {
    CHECK(closed_within(fd, 10s));
    ::close(fd);
  }
  // Then a tenant is served again.
  auto shell = testing::run_shell({"--connect", coord.address(), "--tenant", "vision",
                                   "--tenant-secret-file", f.vision, "-c",
                                   "print(#rw.jobs())"});
  INFO(shell.err);
  CHECK(shell.code == 0);
  CHECK(shell.out == "0\n");
}

} // namespace rw_integration_tenant_door
