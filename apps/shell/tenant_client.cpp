#include "apps/shell/tenant_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "actors/door/requests.hpp"
#include "protocol/tenant_door.hpp"
#include "runtime/tenants.hpp"
#include "services/locator.hpp"
#include "transports/tcp/address.hpp"

namespace rw::shell {

namespace {

using steady = std::chrono::steady_clock;
using bytes = protocol::door::bytes;
namespace door = actors::door;

int remaining_ms(steady::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline
                                                                    - steady::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

} // namespace

struct tenant_client::impl {
  std::string connect;
  std::chrono::milliseconds timeout;
  std::string tenant, secret;
  std::string address; // the door's HOST:PORT, once found
  int fd = -1;
  std::unique_ptr<protocol::door::channel> session;
  uint32_t next_id = 1;

  ~impl() { drop(); }

  void drop() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
    session.reset();
  }

  [[noreturn]] void lost(const std::string& what, const std::string& why,
                         errc code = errc::unavailable) {
    drop();
    throw shell_error(fmt::format("{}: the tenant door at {}: {}", what, address, why),
                      code);
  }

  void send_all(const std::string& what, const bytes& body, steady::time_point deadline) {
    auto frame = protocol::door::framed(body);
    size_t done = 0;
    while (done < frame.size()) {
      auto n = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
          lost(what, fmt::format("took no bytes within {} ms", timeout.count()),
               errc::timeout);
        continue;
      }
      lost(what, fmt::format("the connection failed: {}", std::strerror(errno)));
    }
  }

  void read_exact(const std::string& what, std::byte* out, size_t size,
                  steady::time_point deadline) {
    size_t done = 0;
    while (done < size) {
      auto n = ::recv(fd, out + done, size - done, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0)
        lost(what, "it closed the connection");
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
          lost(what, fmt::format("no answer within {} ms", timeout.count()),
               errc::timeout);
        continue;
      }
      lost(what, fmt::format("the connection failed: {}", std::strerror(errno)));
    }
  }

  bytes read_frame(const std::string& what, uint32_t most, steady::time_point deadline) {
    std::byte h[4];
    read_exact(what, h, 4, deadline);
    auto n = protocol::door::frame_length(h);
    if (n == 0 || n > most)
      lost(what, fmt::format("a frame of {} bytes (at most {})", n, most),
           errc::bad_frame);
    bytes body(n);
    read_exact(what, body.data(), n, deadline);
    return body;
  }

  // Finds the door through the node at `connect`, and opens a session.
  void open() {
    drop();
    auto deadline = steady::now() + timeout;
    protocol::located_msg located;
    try {
      located = services::locate(connect, timeout);
    } catch (const std::exception& e) {
      throw shell_error(e.what(), errc::unavailable);
    }
    if (located.tenant_door.empty())
      throw shell_error(
        fmt::format("the cluster of the node at {} has no tenant door: its coordinator "
                    "runs without --tenants-file (an operator's shell gives "
                    "--cluster-secret-file instead of --tenant)",
                    connect),
        errc::unauthorized);
    address = located.tenant_door;
    const std::string what = "opening a session";
    try {
      fd = transports::tcp::connect_to(transports::tcp::parse_address(address), timeout);
    } catch (const std::exception& e) {
      throw shell_error(
        fmt::format("the node at {} points to the tenant door at {}, which does not "
                    "answer: {}",
                    connect, address, e.what()),
        errc::unavailable);
    }
    protocol::door::client_handshake hs{tenant, secret};
    send_all(what, hs.hello(), deadline);
    std::string why;
    bytes proof;
    auto challenge = read_frame(what, protocol::door::max_handshake_frame, deadline);
    if (auto code = hs.on_challenge(challenge, proof, why); code != errc::ok)
      lost(what, why, code);
    send_all(what, proof, deadline);
    auto welcome = read_frame(what, protocol::door::max_handshake_frame, deadline);
    if (auto code = hs.on_welcome(welcome, why); code != errc::ok)
      lost(what, why, code);
    session = hs.take_session();
  }

  // Whether the door closed the session while it was idle (it says nothing unasked:
  // anything readable now is its close).
  bool closed_meanwhile() {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }

  // One request and its answer; the answer's encoding, or shell_error.
  bytes ask(const std::string& what, door::request r) {
    if (fd < 0 || closed_meanwhile())
      open();
    r.id = next_id++;
    auto plain = door::encode(r);
    auto deadline = steady::now() + timeout;
    send_all(what, session->seal(plain.data(), plain.size()), deadline);
    auto sealed = read_frame(what, protocol::door::max_reply_frame, deadline);
    bytes answer;
    if (!session->open(sealed.data(), sealed.size(), answer))
      lost(what, "a frame that does not open with the session's key", errc::bad_frame);
    door::reply reply;
    if (!door::decode(answer, reply) || reply.id != r.id)
      lost(what, "an answer that is not one to this request", errc::bad_frame);
    if (reply.code != errc::ok)
      throw shell_error(fmt::format("{}: {}", what, reply.reason), reply.code);
    return std::move(reply.answer);
  }

  template <class T>
  T ask_for(const std::string& what, door::request r) {
    auto encoded = ask(what, std::move(r));
    T out{};
    if (!door::decode_answer(encoded, out))
      lost(what, "an answer that does not decode", errc::bad_frame);
    return out;
  }

  [[noreturn]] void operators_only(const char* what) {
    throw shell_error(fmt::format("{} is an operator's call (the cluster secret); tenant "
                                  "'{}' may create, watch, change, stop and delete its "
                                  "own jobs",
                                  what, tenant),
                      errc::unauthorized);
  }
};

tenant_client::tenant_client(std::string connect, std::chrono::milliseconds timeout,
                             std::string tenant, std::string secret)
  : impl_(std::make_unique<impl>()) {
  if (auto why = runtime::tenant_name_error(tenant); !why.empty())
    throw shell_error(fmt::format("--tenant '{}': {}", tenant.substr(0, 64), why),
                      errc::invalid_spec);
  impl_->connect = std::move(connect);
  impl_->timeout = timeout;
  impl_->tenant = std::move(tenant);
  impl_->secret = std::move(secret);
  impl_->open();
}

tenant_client::~tenant_client() = default;

std::vector<actors::node_info> tenant_client::nodes() {
  door::request r;
  r.op = door::op::nodes;
  return impl_->ask_for<std::vector<actors::node_info>>("nodes", std::move(r));
}

std::vector<actors::job_report> tenant_client::jobs() {
  door::request r;
  r.op = door::op::jobs;
  return impl_->ask_for<std::vector<actors::job_report>>("jobs", std::move(r));
}

actors::job_created tenant_client::job_create(const job_spec& spec,
                                              const actors::job_placement& placement) {
  door::request r;
  r.op = door::op::create;
  r.spec = spec;
  r.placement = placement;
  return impl_->ask_for<actors::job_created>("job_create", std::move(r));
}

actors::job_report tenant_client::job_status(const std::string& name) {
  door::request r;
  r.op = door::op::status;
  r.name = name;
  return impl_->ask_for<actors::job_report>("job_status", std::move(r));
}

actors::job_report tenant_client::job_stop(const std::string& name) {
  door::request r;
  r.op = door::op::stop;
  r.name = name;
  return impl_->ask_for<actors::job_report>("job_stop", std::move(r));
}

uint64_t tenant_client::job_set(const std::string& name, const hyper_change& change) {
  door::request r;
  r.op = door::op::set;
  r.name = name;
  r.change = change;
  return impl_->ask_for<uint64_t>("job_set", std::move(r));
}

void tenant_client::job_delete(const std::string& name) {
  door::request r;
  r.op = door::op::remove;
  r.name = name;
  impl_->ask("job_delete", std::move(r));
}

std::string tenant_client::inject(const std::string&, const std::string&,
                                  const std::string&, uint32_t) {
  impl_->operators_only("fault injection");
}

actors::checkpoint_info tenant_client::checkpoint(const std::string&, const std::string&,
                                                  uint64_t) {
  impl_->operators_only("checkpoint");
}

std::string tenant_client::node_drain(const std::string&) {
  impl_->operators_only("draining a node");
}

std::string tenant_client::node_join(const std::string&) {
  impl_->operators_only("joining a node to the running jobs");
}

std::string tenant_client::coordinator() const {
  return impl_->address;
}

} // namespace rw::shell
