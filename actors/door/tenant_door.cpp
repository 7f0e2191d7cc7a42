#include "actors/door/tenant_door.hpp"

#include <cstring>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/door/requests.hpp"
#include "logic/limited_log.hpp"
#include "logic/log_text.hpp"
#include "transports/tcp/address.hpp"

namespace rw::actors::door {

namespace {

using steady = std::chrono::steady_clock;
using protocol::door::server_handshake;

struct connection {
  std::string host;
  std::string peer; // HOST:PORT, for logs and the coordinator's
  std::unique_ptr<server_handshake> handshake;
  bool want_length = true; // the next read is a frame's 4-byte length
  bool busy = false;       // a request is with the coordinator
  bool session = false;    // counted among the sessions (else among the strangers)
  uint64_t serial = 0;     // which connection an answer is for (handles are reused)
  steady::time_point since, last;
};

struct door_state {
  door_settings settings;
  cluster_coordinator_actor coordinator;
  std::map<caf::io::connection_handle, connection> connections;
  std::map<std::string, uint32_t> strangers_by_host;
  uint32_t strangers = 0;
  uint32_t sessions = 0;
  uint64_t serials = 0;
  caf::expected<uint16_t> port = caf::sec::invalid_argument;
  static inline const char* name = "rw.tenant_door";
};

using door_ptr = caf::io::stateful_broker<door_state>*;

void limited(spdlog::level::level_enum level, const connection& c,
             const std::string& reason, const std::string& line) {
  actors::detail::log_limited(level, c.peer, "door " + reason, "tenant door: " + line);
}

void write(door_ptr self, caf::io::connection_handle hdl, const bytes& body) {
  auto frame = protocol::door::framed(body);
  auto& buf = self->wr_buf(hdl);
  auto* p = reinterpret_cast<const char*>(frame.data());
  buf.insert(buf.end(), p, p + frame.size());
  self->flush(hdl);
}

void forget(door_ptr self, caf::io::connection_handle hdl) {
  auto& st = self->state;
  auto it = st.connections.find(hdl);
  if (it == st.connections.end())
    return;
  if (it->second.session) {
    --st.sessions;
  } else {
    --st.strangers;
    if (--st.strangers_by_host[it->second.host] == 0)
      st.strangers_by_host.erase(it->second.host);
  }
  st.connections.erase(it);
}

void close(door_ptr self, caf::io::connection_handle hdl) {
  forget(self, hdl);
  self->close(hdl);
}

void send_sealed(door_ptr self, caf::io::connection_handle hdl, connection& c,
                 const bytes& plain) {
  write(self, hdl, c.handshake->session().seal(plain.data(), plain.size()));
}

void on_new(door_ptr self, caf::io::connection_handle hdl) {
  auto& st = self->state;
  connection c;
  c.host = self->remote_addr(hdl);
  c.peer = fmt::format("{}:{}", c.host, self->remote_port(hdl));
  auto& from_host = st.strangers_by_host[c.host];
  if (st.strangers >= st.settings.max_strangers
      || from_host >= st.settings.max_strangers_per_host) {
    if (from_host == 0)
      st.strangers_by_host.erase(c.host);
    limited(spdlog::level::warn, c, "full",
            fmt::format("a connection from {} closed at once: {} connections have not "
                        "finished the handshake ({} from that host; at most {}, and {} "
                        "per host)",
                        c.peer, st.strangers, from_host, st.settings.max_strangers,
                        st.settings.max_strangers_per_host));
    self->close(hdl);
    return;
  }
  ++from_host;
  ++st.strangers;
  c.handshake = std::make_unique<server_handshake>(
    [self](const std::string& tenant) -> std::optional<std::string> {
      auto& tenants = self->state.settings.tenants;
      auto it = tenants.find(tenant);
      if (it == tenants.end())
        return std::nullopt;
      return it->second.secret;
    });
  c.serial = ++st.serials;
  c.since = c.last = steady::now();
  st.connections.emplace(hdl, std::move(c));
  self->configure_read(hdl, caf::io::receive_policy::exactly(4));
}

// The coordinator's answer to request `id` of the session on `hdl`, if it is still
// the connection that asked.
template <class Answer>
void answer(door_ptr self, caf::io::connection_handle hdl, uint64_t serial, uint32_t id,
            const Answer* result, const caf::error* err) {
  auto it = self->state.connections.find(hdl);
  if (it == self->state.connections.end() || it->second.serial != serial)
    return; // the shell left meanwhile
  auto& c = it->second;
  c.busy = false;
  c.last = steady::now();
  if (result) {
    if constexpr (std::is_same_v<Answer, ok_atom>)
      send_sealed(self, hdl, c, encode_answer(id));
    else
      send_sealed(self, hdl, c, encode_answer(id, *result));
    return;
  }
  errc code = errc::unavailable;
  std::string why;
  if (err->category() == caf::atom("rw")) {
    code = static_cast<errc>(err->code());
    why = describe(self->system(), *err);
  } else if (*err == caf::sec::request_timeout) {
    code = errc::timeout;
    why = fmt::format("the coordinator did not answer within {} ms",
                      self->state.settings.request_timeout.count());
  } else {
    why = "the coordinator cannot be reached: " + self->system().render(*err);
  }
  send_sealed(self, hdl, c, encode_refusal(id, code, why));
}

template <class Answer, class... Ts>
void forward(door_ptr self, caf::io::connection_handle hdl, const connection& c,
             uint32_t id, Ts&&... xs) {
  auto serial = c.serial;
  self
    ->request(self->state.coordinator, self->state.settings.request_timeout,
              tenant_atom::value, self->state.settings.key, c.handshake->tenant(), c.peer,
              std::forward<Ts>(xs)...)
    .then(
      [=](Answer& result) { answer<Answer>(self, hdl, serial, id, &result, nullptr); },
      [=](caf::error& err) { answer<Answer>(self, hdl, serial, id, nullptr, &err); });
}

void on_request(door_ptr self, caf::io::connection_handle hdl, connection& c,
                const bytes& sealed) {
  bytes plain;
  if (!c.handshake->session().open(sealed.data(), sealed.size(), plain)) {
    limited(
      spdlog::level::warn, c, "unsealed",
      fmt::format("tenant '{}' at {}: a frame that does not open with the session's "
                  "key (altered, replayed or out of order): session closed",
                  c.handshake->tenant(), c.peer));
    close(self, hdl);
    return;
  }
  if (c.busy) {
    limited(spdlog::level::warn, c, "busy",
            fmt::format("tenant '{}' at {}: a second request before the answer to the "
                        "first: session closed",
                        c.handshake->tenant(), c.peer));
    close(self, hdl);
    return;
  }
  request r;
  std::string why;
  if (auto code = decode(plain, r, why); code != errc::ok) {
    limited(
      spdlog::level::warn, c, "refused",
      fmt::format("tenant '{}' at {}: refused: {}", c.handshake->tenant(), c.peer, why));
    send_sealed(self, hdl, c, encode_refusal(r.id, code, why));
    return;
  }
  if (!self->state.coordinator) {
    send_sealed(self, hdl, c,
                encode_refusal(r.id, errc::unavailable,
                               "the coordinator is starting: try again shortly"));
    return;
  }
  c.busy = true;
  switch (r.op) {
    case op::nodes:
      forward<std::vector<node_info>>(self, hdl, c, r.id, caf::get_atom::value,
                                      nodes_atom::value);
      break;
    case op::jobs:
      forward<std::vector<job_report>>(self, hdl, c, r.id, caf::get_atom::value,
                                       jobs_atom::value);
      break;
    case op::create:
      forward<job_created>(self, hdl, c, r.id, create_atom::value, std::move(r.spec),
                           std::move(r.placement));
      break;
    case op::status:
      forward<job_report>(self, hdl, c, r.id, status_atom::value, std::move(r.name));
      break;
    case op::set:
      forward<uint64_t>(self, hdl, c, r.id, hyper_atom::value, std::move(r.name),
                        std::move(r.change));
      break;
    case op::stop:
      forward<job_report>(self, hdl, c, r.id, stop_atom::value, std::move(r.name));
      break;
    case op::remove:
      forward<ok_atom>(self, hdl, c, r.id, remove_atom::value, std::move(r.name));
      break;
  }
}

void on_handshake(door_ptr self, caf::io::connection_handle hdl, connection& c,
                  const bytes& body) {
  auto& st = self->state;
  auto step = c.handshake->on_frame(body);
  if (!step.refused.empty()) {
    limited(
      spdlog::level::warn, c, "handshake",
      fmt::format("{} refused: {}", c.peer, actors::detail::loggable(step.refused, 256)));
  } else if (c.handshake->open() && st.sessions >= st.settings.max_sessions) {
    step.reply = protocol::door::refusal(
      errc::too_many_requests, fmt::format("the door holds {} sessions, its most: try "
                                           "again shortly",
                                           st.sessions));
    step.close = true;
    limited(spdlog::level::warn, c, "sessions",
            fmt::format("tenant '{}' at {} refused: {} sessions open, the most",
                        c.handshake->tenant(), c.peer, st.sessions));
    // Counted as a stranger until closed below.
    write(self, hdl, step.reply);
    close(self, hdl);
    return;
  }
  if (!step.reply.empty())
    write(self, hdl, step.reply);
  if (step.close) {
    close(self, hdl);
    return;
  }
  if (c.handshake->open()) {
    --st.strangers;
    if (--st.strangers_by_host[c.host] == 0)
      st.strangers_by_host.erase(c.host);
    ++st.sessions;
    c.session = true;
    spdlog::info("tenant door: tenant '{}' proved its secret at {}",
                 c.handshake->tenant(), c.peer);
  }
}

void on_data(door_ptr self, caf::io::new_data_msg& msg) {
  auto it = self->state.connections.find(msg.handle);
  if (it == self->state.connections.end())
    return;
  auto& c = it->second;
  c.last = steady::now();
  if (c.want_length) {
    if (msg.buf.size() != 4) {
      close(self, msg.handle);
      return;
    }
    std::byte h[4];
    std::memcpy(h, msg.buf.data(), 4);
    auto n = protocol::door::frame_length(h);
    auto most = c.handshake->open() ? protocol::door::max_request_frame
                                    : protocol::door::max_handshake_frame;
    if (n == 0 || n > most) {
      limited(spdlog::level::warn, c, "length",
              fmt::format("{}: a frame of {} bytes announced (at most {} {}): closed",
                          c.peer, n, most,
                          c.handshake->open() ? "in a session" : "before the proof"));
      close(self, msg.handle);
      return;
    }
    c.want_length = false;
    self->configure_read(msg.handle, caf::io::receive_policy::exactly(n));
    return;
  }
  c.want_length = true;
  self->configure_read(msg.handle, caf::io::receive_policy::exactly(4));
  auto* p = reinterpret_cast<const std::byte*>(msg.buf.data());
  bytes body(p, p + msg.buf.size());
  if (c.handshake->open())
    on_request(self, msg.handle, c, body);
  else
    on_handshake(self, msg.handle, c, body);
}

// Closes the connections past their handshake deadline and the idle sessions.
void sweep(door_ptr self) {
  auto& st = self->state;
  auto now = steady::now();
  std::vector<caf::io::connection_handle> late;
  for (auto& [hdl, c] : st.connections) {
    if (!c.handshake->open() && now - c.since > st.settings.handshake_timeout) {
      limited(spdlog::level::info, c, "slow",
              fmt::format("{}: no handshake within {} ms: closed", c.peer,
                          st.settings.handshake_timeout.count()));
      late.push_back(hdl);
    } else if (c.handshake->open() && !c.busy
               && now - c.last > st.settings.idle_timeout) {
      spdlog::info("tenant door: tenant '{}' at {} asked nothing for {} ms: session "
                   "closed (the shell opens another at its next request)",
                   c.handshake->tenant(), c.peer, st.settings.idle_timeout.count());
      late.push_back(hdl);
    }
  }
  for (auto& hdl : late)
    close(self, hdl);
}

caf::behavior door_behavior(door_ptr self, door_settings settings) {
  auto& st = self->state;
  st.settings = std::move(settings);
  auto host = transports::tcp::is_wildcard(st.settings.host) ? std::string{}
                                                             : st.settings.host;
  auto bound = self->add_tcp_doorman(st.settings.port,
                                     host.empty() ? nullptr : host.c_str(), true);
  if (!bound)
    st.port = std::move(bound.error());
  else
    st.port = bound->second;
  auto tick = std::min(st.settings.handshake_timeout, std::chrono::milliseconds(1000));
  self->delayed_send(self, tick, tick_atom::value);
  return {
    [=](caf::io::new_connection_msg& msg) { on_new(self, msg.handle); },
    [=](caf::io::new_data_msg& msg) { on_data(self, msg); },
    [=](caf::io::connection_closed_msg& msg) { forget(self, msg.handle); },
    [=](caf::io::acceptor_closed_msg&) {},
    [=](caf::get_atom) -> caf::result<uint16_t> {
      if (!self->state.port)
        return self->state.port.error();
      return *self->state.port;
    },
    [=](caf::put_atom, cluster_coordinator_actor& coordinator) {
      self->state.coordinator = std::move(coordinator);
    },
    [=](tick_atom) {
      sweep(self);
      self->delayed_send(self, tick, tick_atom::value);
    },
  };
}

} // namespace

tenant_door open_tenant_door(caf::actor_system& sys, door_settings settings) {
  auto where = fmt::format("{}:{}", settings.host.empty() ? "*" : settings.host,
                           settings.port);
  auto actor = sys.middleman().spawn_broker(door_behavior, std::move(settings));
  caf::scoped_actor self{sys};
  tenant_door out;
  std::string failure;
  self->request(actor, std::chrono::seconds(10), caf::get_atom::value)
    .receive([&](uint16_t port) { out.port = port; },
             [&](caf::error& err) { failure = sys.render(err); });
  if (!failure.empty()) {
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    throw std::runtime_error(fmt::format(
      "cannot open the tenant door on {}: {} (another process listens there, or the "
      "host is not an address of this machine; give another with --tenant-listen "
      "HOST:PORT, port 0: any free one)",
      where, failure));
  }
  out.actor = std::move(actor);
  return out;
}

} // namespace rw::actors::door
