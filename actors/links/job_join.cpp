#include "actors/links/job_join.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "rackweave/errc.hpp"
#include "runtime/credentials.hpp"
#include "runtime/ring.hpp"
#include "actors/links/fabric_join.hpp"
#include "actors/links/handshake_sink.hpp"
#include "services/probe.hpp"

namespace rw::actors {

namespace {

using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

using detail::handshake_sink;

class joiner {
public:
  /// With `others`: the endpoint has other connections, whose frames go there while
  /// this one waits for a node's answer.
  joiner(transports::tcp::endpoint& ep, join_request req,
         transports::frame_sink* others = nullptr)
    : ep(ep), req(std::move(req)), others(others) {}

  // Waits for the node's welcome (or error) on connection `c`.
  protocol::welcome_msg await_welcome(const transports::connection_ptr& c,
                                      const std::string& what,
                                      bool want_challenge = false) {
    handshake_sink sink{req.token,      req.job.name, req.rank,
                        want_challenge, others,       others != nullptr ? c : nullptr};
    auto deadline = std::chrono::steady_clock::now() + req.request_timeout;
    while (!sink.answered && std::chrono::steady_clock::now() < deadline)
      ep.poll(50, sink);
    if (!sink.answered)
      throw rw::error(errc::timeout, fmt::format("no answer to {} within {} ms", what,
                                                 req.request_timeout.count()));
    if (!sink.ok) {
      moved_to = std::move(sink.candidates);
      throw rw::error(sink.code, sink.message);
    }
    return sink.welcome;
  }

  transports::connection_ptr connect(const std::string& address) {
    try {
      return ep.connect(transports::tcp::parse_address(address), req.connect_timeout);
    } catch (const std::exception& e) {
      throw rw::error(errc::io_error, e.what());
    }
  }

  // Says hello on `c` (to `address`) and waits for the welcome, proving the token
  // if the node asks.
  protocol::welcome_msg say_hello(const transports::connection_ptr& c,
                                  const std::string& address,
                                  const protocol::hello_msg& hello) {
    auto payload = protocol::encode(hello);
    if (payload.size() > defaults::max_control_bytes)
      throw rw::error(errc::invalid_spec, "the job spec is too large to send");
    frame_header h;
    h.kind = frame_kind::hello;
    h.rank = req.rank;
    h.payload_bytes = static_cast<uint32_t>(payload.size());
    iovec iov{payload.data(), payload.size()};
    if (!c->send(h, &iov, 1))
      throw rw::error(errc::io_error, "cannot send hello to " + address);
    return await_welcome(c, "hello from " + address, !req.token.empty());
  }

  // `address` with a wildcard host replaced by the host `via` reached.
  static std::string reachable(const std::string& address, const std::string& via) {
    auto addr = transports::tcp::parse_address(address);
    if (transports::tcp::is_wildcard(addr.host))
      addr.host = transports::tcp::parse_address(via).host;
    return addr.to_string();
  }

  // One connection per endpoint of the node that sent `w` on `first` (reached at
  // `address`): attaches to the others, proving the rank (runtime::prove_attach: keyed
  // by the job's token, bound to the welcome's attach token and a fresh nonce).
  std::vector<transports::connection_ptr> attach_all(const protocol::welcome_msg& w,
                                                     transports::connection_ptr first,
                                                     const std::string& address) {
    std::vector<transports::connection_ptr> conns(w.endpoints.size());
    conns[w.endpoint_index] = std::move(first);
    for (uint32_t i = 0; i < conns.size(); ++i) {
      if (conns[i])
        continue;
      auto addr = reachable(w.endpoints[i], address);
      conns[i] = connect(addr);
      protocol::attach_msg proof;
      proof.nonce = runtime::make_nonce();
      proof.mac = runtime::prove_attach(req.token, w.token, proof.nonce, req.job.name,
                                        req.rank);
      auto payload = protocol::encode(proof);
      frame_header a;
      a.kind = frame_kind::attach;
      a.job_id = w.job_id;
      a.rank = req.rank;
      a.payload_bytes = static_cast<uint32_t>(payload.size());
      iovec piece{payload.data(), payload.size()};
      if (!conns[i]->send(a, &piece, 1))
        throw rw::error(errc::io_error, "cannot attach to " + addr);
      await_welcome(conns[i], "attach to " + addr);
    }
    return conns;
  }

  // A job on several nodes: joins every other node of the job too, and routes each
  // chunk to its home (runtime/ring).
  void join_nodes(transports::connection_ptr first, protocol::hello_msg hello) {
    auto& names = welcome.job_node_names;
    runtime::hash_ring ring{names, welcome.ring_vnodes, welcome.ring_version};
    auto n = static_cast<uint32_t>(names.size());
    std::vector<std::vector<transports::connection_ptr>> node_conns(n);
    std::vector<protocol::welcome_msg> welcomes(n);
    welcomes[welcome.node_index] = welcome;
    node_conns[welcome.node_index] = attach_all(welcome, std::move(first), req.connect);
    hello.shm_segment.clear(); // chunks travel to their homes over TCP
    hello.shm_nonce = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (i == welcome.node_index)
        continue;
      auto address = reachable(welcome.job_nodes[i], req.connect);
      auto c = connect(address);
      welcomes[i] = say_hello(c, address, hello);
      auto& w = welcomes[i];
      if (w.job_id != welcome.job_id || w.job_node_names != names || w.node_index != i
          || w.ring_version != welcome.ring_version)
        throw rw::error(errc::spec_mismatch,
                        fmt::format("node {} at {} does not hold job '{}' as node {} of "
                                    "[{}] (ring version {}): the job's nodes disagree",
                                    names[i], address, req.job.name, i,
                                    fmt::join(names, ","), welcome.ring_version));
      node_conns[i] = attach_all(w, std::move(c), address);
    }
    for (uint32_t i = 0; i < n; ++i)
      out.node_addresses.push_back(i == welcome.node_index
                                     ? req.connect
                                     : reachable(welcome.job_nodes[i], req.connect));
    std::vector<std::shared_ptr<const runtime::routing_table>> tables;
    std::vector<uint32_t> bases;
    std::vector<transports::connection_ptr> conns;
    for (uint32_t i = 0; i < n; ++i) {
      tables.push_back(std::make_shared<runtime::routing_table>(
        req.job, welcomes[i].num_shards, welcomes[i].shard_endpoints, &ring, i,
        welcome.replicas));
      bases.push_back(static_cast<uint32_t>(conns.size()));
      conns.insert(conns.end(), node_conns[i].begin(), node_conns[i].end());
      out.conn_nodes.insert(out.conn_nodes.end(), node_conns[i].size(), names[i]);
    }
    auto basis = std::make_shared<runtime::routes_basis>();
    basis->spec = req.job;
    basis->vnodes = welcome.ring_vnodes;
    basis->version = welcome.ring_version;
    basis->names = names;
    for (auto& w : welcomes) {
      basis->num_shards.push_back(w.num_shards);
      basis->shard_endpoints.push_back(w.shard_endpoints);
    }
    basis->endpoint_base = bases;
    out.basis = std::move(basis);
    std::vector<bool> homes; // whether node i homes chunks of the job
    for (auto& t : tables)
      homes.push_back(t->local_chunks() > 0);
    out.routes = std::make_shared<runtime::job_routes>(std::move(tables),
                                                       std::move(bases));
    out.conns = std::move(conns);
    // Where the rank goes on from: the lowest clock of the nodes that home chunks of
    // the job. A node that homes none (its chunks' replicas only, or none at all) knows
    // no clock of the rank and says 0, which is "a new rank": counted, it made a worker
    // that joins again replay every step from 0 (each answered as a duplicate, but one
    // step's time each: 0.6 s of bench/failover.sh's paced smoke).
    bool any = false;
    for (uint32_t i = 0; i < n; ++i) {
      if (!homes[i])
        continue;
      out.resume_clock = any ? std::min(out.resume_clock, welcomes[i].resume_clock)
                             : welcomes[i].resume_clock;
      any = true;
    }
    if (!any)
      for (auto& w : welcomes)
        out.resume_clock = std::min(out.resume_clock, w.resume_clock);
  }

  joined_job handshake() {
    protocol::hello_msg hello{req.job,  req.rank,     {}, 0, !req.token.empty(),
                              req.rack, req.picked_by};
    hello.spec_from_job = req.spec_from_job;
    if (req.spec_from_job && req.transport == "shm")
      throw rw::error(
        errc::invalid_spec,
        "transport shm needs the job's spec stated (the shared memory segment "
        "is sized from its tensors before the hello); use auto or tcp");
    std::unique_ptr<transports::shm::worker_channel> channel;
    if ((req.transport == "auto" || req.transport == "shm") && !req.spec_from_job) {
      try {
        channel = std::make_unique<transports::shm::worker_channel>(req.job);
        hello.shm_segment = channel->name();
        hello.shm_nonce = channel->nonce();
      } catch (const std::exception& e) {
        if (req.transport == "shm")
          throw rw::error(errc::io_error, std::string("no shared memory: ") + e.what());
        spdlog::warn(
          "worker rank {}: shared memory not used ({}); chunks travel over TCP", req.rank,
          e.what());
      }
    }
    auto first = connect(req.connect);
    try {
      welcome = say_hello(first, req.connect, hello);
    } catch (...) {
      first->close(); // refused (or sent elsewhere): nothing more comes on it
      throw;
    }
    if (req.spec_from_job) { // from here on the worker states the job's spec
      if (welcome.spec.name != req.job.name || welcome.spec.tensors.empty())
        throw rw::error(
          errc::spec_mismatch,
          fmt::format("the node at {} did not send job '{}''s spec (it sent "
                      "'{}' with {} tensors)",
                      req.connect, req.job.name, welcome.spec.name,
                      welcome.spec.tensors.size()));
      req.job = welcome.spec;
      req.spec_from_job = false;
      hello.spec = req.job;
      hello.spec_from_job = false;
    }
    out.resume_clock = welcome.resume_clock;
    auto single = [&] {
      return std::make_shared<runtime::job_routes>(
        std::make_shared<runtime::routing_table>(req.job, welcome.num_shards,
                                                 welcome.shard_endpoints));
    };
    if (welcome.shm) {
      if (welcome.shm_handover.empty()) {
        first->close();
        throw rw::error(errc::io_error,
                        "the node took this worker's shared memory but offered no "
                        "handover of its doorbell (it could not, or it is older than "
                        "this worker: see the node's log); use transport tcp");
      }
      try {
        channel->connect(welcome.shm_handover, welcome.shm_ticket, req.job);
      } catch (const std::exception& e) {
        throw rw::error(errc::io_error,
                        std::string("shared memory with the node: ") + e.what());
      }
      out.conns = {first};
      out.conn_nodes = {welcome.node_name};
      out.routes = single();
      out.shm = std::move(channel);
      out.welcome = welcome;
      return std::move(out);
    }
    if (req.transport == "shm")
      throw rw::error(
        errc::io_error,
        welcome.job_nodes.size() > 1
          ? std::string("the job spans several nodes, so its chunks travel "
                        "over TCP; use transport auto or tcp")
          : std::string("the node did not take this worker's shared memory (it "
                        "is on another host, or runs with --no-shm); use "
                        "transport auto or tcp"));
    channel.reset(); // removes the segment
    if (welcome.job_nodes.size() <= 1
        && (req.transport == "fabric"
            || (req.transport == "auto" && !welcome.fabric.empty()))) {
      try {
        auto link = detail::join_fabric(ep, first, welcome, req);
        // One connection serves every shard: each shard's endpoint is 0.
        std::vector<std::vector<uint32_t>> at_zero(welcome.num_shards, {0});
        out.routes = std::make_shared<runtime::job_routes>(
          std::make_shared<runtime::routing_table>(req.job, welcome.num_shards, at_zero));
        out.conns = {link.conn};
        out.conn_nodes = {welcome.node_name};
        out.node_addresses = {req.connect};
        out.fabric = link.ep;
        out.companion = first;
        out.welcome = welcome;
        return std::move(out);
      } catch (const rw::error& e) {
        if (req.transport == "fabric") {
          first->close();
          throw rw::error(e.code(), std::string("transport fabric: ") + e.what());
        }
        spdlog::info("worker rank {}: fabric not used ({}); chunks travel over TCP",
                     req.rank, e.what());
      }
    } else if (req.transport == "fabric") {
      first->close();
      throw rw::error(
        errc::unavailable,
        "transport fabric: the job spans several nodes, so its chunks travel "
        "to their homes over TCP; use transport auto or tcp");
    }
    if (welcome.job_nodes.size() > 1) {
      join_nodes(std::move(first), std::move(hello));
    } else {
      // One connection per node endpoint; attach to the others with the token.
      out.conns = attach_all(welcome, first, req.connect);
      out.conn_nodes.assign(out.conns.size(), welcome.node_name);
      out.node_addresses = {req.connect};
      out.routes = single();
    }
    out.welcome = welcome;
    return std::move(out);
  }

  // One more node of the running job (named `node` at `address` on the ring at
  // `ring_version`): hello, the welcome checked, then attach to its other endpoints.
  joined_node join_one(const std::string& address, const std::string& node,
                       uint32_t job_id, uint64_t ring_version) {
    protocol::hello_msg hello{req.job, req.rank, {}, 0, !req.token.empty(), req.rack, {}};
    auto at = reachable(address, req.connect);
    joined_node out;
    auto c = connect(at);
    try {
      out.welcome = say_hello(c, at, hello);
      auto& w = out.welcome;
      auto index = std::find(w.job_node_names.begin(), w.job_node_names.end(), node);
      bool same_ring =
        ring_version == 0 // a reconnect: the node itself is what counts
          ? w.node_name == node
          : w.ring_version == ring_version && index != w.job_node_names.end()
              && w.node_index == static_cast<uint32_t>(index - w.job_node_names.begin());
      if (w.job_id != job_id || !same_ring)
        throw rw::error(
          errc::spec_mismatch,
          fmt::format("node {} at {} does not hold job '{}' (id {}) as node {} of "
                      "its ring version {} (it answered job id {}, nodes [{}], "
                      "ring version {})",
                      node, at, req.job.name, job_id, node, ring_version, w.job_id,
                      fmt::join(w.job_node_names, ","), w.ring_version));
      out.conns = attach_all(w, c, at);
    } catch (...) {
      c->close();
      for (auto& other : out.conns)
        if (other)
          other->close();
      throw;
    }
    return out;
  }

  /// After a `moved` answer: the candidates it named (empty: only the message's).
  std::vector<std::string> moved_to;

private:
  transports::tcp::endpoint& ep;
  join_request req; // with spec_from_job: the job's spec once the first node sent it
  transports::frame_sink* others;
  protocol::welcome_msg welcome;
  joined_job out;
};

// The candidate with the lowest connect round trip; `why` says so, with every one.
std::string nearest(const join_request& req, const std::vector<std::string>& candidates,
                    std::string& why) {
  std::string best;
  double best_ms = 0;
  std::vector<std::string> seen;
  auto timeout = std::min(req.connect_timeout,
                          std::chrono::milliseconds(defaults::rtt_probe_timeout_ms));
  for (auto& c : candidates) {
    auto ms = services::connect_round_trip(c, defaults::rtt_probes, timeout);
    seen.push_back(ms ? fmt::format("{} {:.3f} ms", c, *ms) : c + " unreachable");
    if (ms && (best.empty() || *ms < best_ms)) {
      best = c;
      best_ms = *ms;
    }
  }
  if (best.empty())
    throw rw::error(errc::io_error,
                    fmt::format("none of job '{}''s nodes answers a connect: {}",
                                req.job.name, fmt::join(seen, ", ")));
  why = fmt::format("lowest round trip {:.3f} ms among {}", best_ms,
                    fmt::join(seen, ", "));
  return best;
}

// Lets the refused connection's close be reported to nobody, so the next hello's wait
// does not take it for its own.
void drain(transports::tcp::endpoint& ep) {
  struct ignore final : transports::frame_sink {
    payload_target on_header(const transports::connection_ptr&,
                             const frame_header&) override {
      return payload_target::dropped();
    }
    void on_frame(const transports::connection_ptr&, const frame_header&,
                  payload_target&) override {}
    void on_closed(const transports::connection_ptr&, errc, const std::string&) override {
    }
  } none;
  for (int i = 0; i < 50 && ep.connection_count() > 0; ++i)
    ep.poll(10, none);
}

// A node outside the job may send the worker to the job's nodes, and that node to its
// rack's agg: at most this many hellos in all.
constexpr int max_hellos = 3;
// A node sent back to itself (the cluster places the job there and the node's grant is
// still on its way: a job restarted from a checkpoint) is asked again after a pause, at
// most this many times.
constexpr int max_same_node_hellos = 15;
constexpr auto same_node_pause = std::chrono::milliseconds(200);

} // namespace

joined_node join_node(transports::tcp::endpoint& ep, const join_request& req,
                      const std::string& address, const std::string& node,
                      uint32_t job_id, uint64_t ring_version,
                      transports::frame_sink& others) {
  joiner j{ep, req, &others};
  return j.join_one(address, node, job_id, ring_version);
}

transports::connection_ptr join_as_mirror(transports::tcp::endpoint& ep,
                                          const join_request& req,
                                          const std::string& address,
                                          transports::frame_sink& others) {
  auto at = req;
  at.rank = protocol::mirror_rank;
  joiner j{ep, at, &others};
  auto c = j.connect(address);
  protocol::hello_msg hello;
  hello.spec = req.job;
  hello.rank = protocol::mirror_rank;
  hello.has_token = true;
  hello.mirror = true;
  try {
    j.say_hello(c, address, hello);
  } catch (...) {
    c->close();
    throw;
  }
  return c;
}

joined_job join_job(transports::tcp::endpoint& ep, const join_request& req) {
  auto at = req;
  int same_node = 0;
  for (int hello = 1;; ++hello) {
    joiner j{ep, at};
    try {
      return j.handshake();
    } catch (const rw::error& e) {
      if (e.code() != errc::moved || hello - same_node >= max_hellos)
        throw;
      auto next = j.moved_to;
      if (next.empty()) { // an older node: the address is the message's first word
        std::string text = e.what();
        next.push_back(text.substr(0, text.find(' ')));
      }
      at.picked_by.clear();
      if (next.size() == 1) {
        if (next[0].empty())
          throw;
        if (next[0] == at.connect) {
          if (++same_node > max_same_node_hellos)
            throw;
          drain(ep);
          std::this_thread::sleep_for(same_node_pause);
          continue;
        }
        at.connect = next[0];
      } else {
        at.connect = nearest(at, next, at.picked_by);
        fmt::print(stderr, "rackweave: rank {} of job '{}' says hello at {}: {}\n",
                   req.rank, req.job.name, at.connect, at.picked_by);
      }
      drain(ep);
    }
  }
}

} // namespace rw::actors
