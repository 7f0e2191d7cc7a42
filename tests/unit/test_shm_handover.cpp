// The node's shared memory handover (issue 59, finding 4): segments reach a worker as
// descriptors, once, for the ticket its welcome carried; a stranger on the socket gets
// nothing and holds nothing for long.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transports/shm/handover.hpp"
#include "transports/shm/segment.hpp"

namespace rw_unit_shm_handover {

using namespace rw::transports::shm;
using namespace std::chrono_literals;

namespace {

rw::job_spec spec_of(uint64_t elements) {
  rw::job_spec s;
  s.name = "handover";
  s.chunk_bytes = 4096;
  s.tensors = {{"a", elements, false}};
  return s;
}

// A connection to the handover that sends `bytes` and keeps quiet (-1: failed).
int connect_raw(const std::string& address, const std::string& bytes = {}) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, address.data() + 1, address.size() - 1);
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(fd);
    return -1;
  }
  if (!bytes.empty())
    (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  return fd;
}

// Whether the handover closed `fd` (end of stream) within `within`.
bool closed_by_peer(int fd, std::chrono::milliseconds within) {
  timeval tv{0, static_cast<suseconds_t>(within.count() * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b;
  return ::recv(fd, &b, 1, 0) == 0;
}

} // namespace

TEST_CASE("a welcome's ticket collects its segments once, the parameters read-only",
          "[shm][handover]") {
  auto spec = spec_of(5000);
  auto bell = create_node_bell();
  auto params = create_params_segment(spec);
  params.as<float>()[3] = 2.5f;
  handover h;
  CHECK(h.address().rfind("@rackweave-", 0) == 0);
  auto ticket = h.offer({{bell.name(), false}, {params.name(), true}});
  CHECK(ticket.size() == handover::ticket_bytes);
  CHECK(h.outstanding() == 1);

  auto fds = collect_handover(h.address(), ticket, 2s);
  REQUIRE(fds.size() == 2);
  CHECK(h.outstanding() == 0);
  // The parameters' descriptor is read-only: no writable mapping, no write, no resize.
  CHECK(::mmap(nullptr, params.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0)
        == MAP_FAILED);
  float x = 1.0f;
  CHECK(::pwrite(fds[1], &x, sizeof(x), 0) < 0);
  CHECK(::ftruncate(fds[1], 0) != 0);
  auto seen = adopt_params_segment(fds[1], spec);
  CHECK(seen.as<float>()[3] == 2.5f);
  auto rung = adopt_node_bell(fds[0]);
  rung.as<node_bell_segment>()->bell.seq.store(7);
  CHECK(bell.as<node_bell_segment>()->bell.seq.load() == 7); // the same memory

  // Used once: a second collection with the same ticket is refused.
  CHECK_THROWS_WITH(collect_handover(h.address(), ticket, 2s),
                    Catch::Contains("refused the handover ticket"));
  CHECK(h.refused() == 1);
}

TEST_CASE("a ticket nobody was given, or one past its life, collects nothing",
          "[shm][handover]") {
  auto bell = create_node_bell();
  handover_limits limits;
  limits.ticket_life = 100ms;
  handover h{limits};
  auto ticket = h.offer({{bell.name(), false}});
  auto guess = ticket;
  guess[31] = static_cast<char>(guess[31] ^ 1);
  CHECK_THROWS_WITH(collect_handover(h.address(), guess, 2s),
                    Catch::Contains("refused the handover ticket"));
  CHECK(h.outstanding() == 1); // a wrong guess spends nobody's ticket
  std::this_thread::sleep_for(250ms);
  CHECK_THROWS_WITH(collect_handover(h.address(), ticket, 2s),
                    Catch::Contains("refused the handover ticket"));
  CHECK(h.outstanding() == 0);
  CHECK_THROWS_WITH(collect_handover(h.address(), "short", 2s),
                    Catch::Contains("32 bytes"));
  CHECK_THROWS_WITH(collect_handover("/proc/1/fd/3", ticket, 2s),
                    Catch::Contains("not a shared memory handover address"));
}

TEST_CASE("strangers on the handover socket are closed in time and cannot keep a "
          "worker out",
          "[shm][handover]") {
  auto bell = create_node_bell();
  handover_limits limits;
  limits.max_connections = 4;
  limits.connection_time = 200ms;
  handover h{limits};
  auto ticket = h.offer({{bell.name(), false}});
  // Every slot taken by connections that send nothing, or half a ticket.
  std::vector<int> quiet;
  for (int i = 0; i < 4; ++i)
    quiet.push_back(connect_raw(h.address(), i % 2 == 0 ? std::string(16, 'x') : ""));
  for (int fd : quiet)
    REQUIRE(fd >= 0);
  // The worker waits in the backlog until a slot frees, then collects.
  auto start = std::chrono::steady_clock::now();
  auto fds = collect_handover(h.address(), ticket, 3s);
  CHECK(fds.size() == 1);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  for (int fd : fds)
    ::close(fd);
  for (int fd : quiet) {
    CHECK(closed_by_peer(fd, 1000ms));
    ::close(fd);
  }
  CHECK(h.refused() >= 4);
}

TEST_CASE("outstanding tickets are bounded: the oldest goes first", "[shm][handover]") {
  auto bell = create_node_bell();
  handover_limits limits;
  limits.max_tickets = 2;
  handover h{limits};
  auto first = h.offer({{bell.name(), false}});
  auto second = h.offer({{bell.name(), false}});
  auto third = h.offer({{bell.name(), false}});
  CHECK(h.outstanding() == 2);
  CHECK_THROWS_WITH(collect_handover(h.address(), first, 2s), Catch::Contains("refused"));
  for (auto& t : {second, third}) {
    auto fds = collect_handover(h.address(), t, 2s);
    CHECK(fds.size() == 1);
    for (int fd : fds)
      ::close(fd);
  }
  CHECK_THROWS_AS(h.offer({{"/proc/self/fd/999999", true}}), std::runtime_error);
  CHECK(h.outstanding() == 0);
}

} // namespace rw_unit_shm_handover
