// Admission of workers on a NIC poller: a hello or an attach goes to the rack
// coordinator; the answer binds the connection to (job, rank) and is sent back as a
// welcome (the node's endpoints, routing table, attach token and, for a worker on
// this host, its adopted shared memory) or as an error frame. A hello for a job with
// a token is first answered with a challenge; the worker's proof then goes to the
// coordinator like a hello. A locate is answered with the cluster coordinator's
// address.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"
#include "transports/fabric/endpoint.hpp"
#include "transports/shm/connection.hpp"

namespace rw::actors::detail {

namespace {
constexpr auto hello_timeout = std::chrono::seconds(30);
// A proof of a job placed at join is answered once every rank is placed: the rack
// coordinator answers within the job's join timeout (at most this long) itself.
constexpr auto proof_timeout = std::chrono::milliseconds(defaults::max_join_timeout_ms)
                               + hello_timeout;
} // namespace

void poller_sink::on_hello(const connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  auto& st = self_->state;
  protocol::hello_msg hello;
  std::string why;
  if (decode(t.dst, h.payload_bytes, hello, why) != errc::ok) {
    refuse(c, h, errc::bad_frame, why);
    return;
  }
  st.book->bindings[c->id()] = binding{};
  c->admit(transports::admission::waiting); // on this node's answer: it may be quiet
  auto pending = self_->request(st.book->coordinator, hello_timeout, hello_atom::value,
                                hello_request{hello, c->peer()});
  join(c, hello.rank, std::move(pending), std::move(hello));
}

// Maps the worker's segment if it offered one and may use it; null otherwise.
transports::connection_ptr poller_sink::adopt_shm(const connection_ptr& c,
                                                  const job_binding& jb,
                                                  const protocol::hello_msg& hello) {
  auto& st = self_->state;
  if (hello.shm_segment.empty())
    return nullptr;
  // A flat job's worker sends each chunk to its home node; a hierarchical job's worker
  // talks to this node alone, which relays its rack's partial sums.
  if (jb.layout.nodes.size() > 1 && !is_hierarchical(jb.layout)) {
    spdlog::info("shared memory not used: peer={} job={} rank={}: the job spans {} nodes "
                 "and its chunks travel to their homes over TCP",
                 c->peer(), jb.job_id, hello.rank, jb.layout.nodes.size());
    return nullptr;
  }
  if (!st.book->shm_poller || !c->same_host()) {
    spdlog::info("shared memory not used: peer={} job={} rank={}: {}", c->peer(),
                 jb.job_id, hello.rank,
                 st.book->shm_poller ? "the worker is on another host"
                                     : "this node has shared memory disabled");
    return nullptr;
  }
  try {
    auto seg = transports::shm::open_worker_segment(hello.shm_segment, hello.shm_nonce,
                                                    hello.spec);
    auto conn = std::make_shared<transports::shm::connection>(
      std::move(seg), hello.spec, c->peer() + " (shm)", jb.job_id, hello.rank,
      !jb.params_segment.empty());
    self_->send(caf::actor_cast<nic_poller_actor>(st.book->shm_poller), adopt_atom::value,
                transports::connection_ptr{conn}, jb, hello.rank);
    return conn;
  } catch (const std::exception& e) {
    spdlog::warn("shared memory refused: peer={} job={} rank={}: {}", c->peer(),
                 jb.job_id, hello.rank, e.what());
    return nullptr;
  }
}

void poller_sink::offer_shm(protocol::welcome_msg& w, const job_binding& jb) {
  auto& st = self_->state;
  if (!st.book->shm_handover)
    return;
  std::vector<transports::shm::handover_segment> segments{{st.book->shm_bell, false}};
  if (!jb.params_segment.empty())
    segments.push_back({jb.params_segment, true}); // read-only: results, not a canvas
  try {
    w.shm_ticket = st.book->shm_handover->offer(segments);
    w.shm_handover = st.book->shm_handover->address();
  } catch (const std::exception& e) {
    spdlog::error("shared memory handover: job={}: {} (the worker will fail to join "
                  "with shared memory)",
                  jb.job_id, e.what());
  }
}

void poller_sink::on_fabric(const connection_ptr& c, const frame_header& h,
                            payload_target& t) {
  auto& st = self_->state;
  auto& b = st.book->bindings[c->id()];
  frame_header reply;
  reply.kind = frame_kind::fabric;
  reply.job_id = b.job_id;
  reply.rank = b.rank;
  auto decline = [&](errc code, const std::string& why) {
    spdlog::info("fabric not used: peer={} job={} rank={}: {}", c->peer(), b.job_id,
                 b.rank, why);
    c->send_error(code, "fabric: " + why, reply);
  };
  // The NIC whose receive pool has lent least (the fewest workers) takes this one.
  const poller_book::fabric_path* path = nullptr;
  transports::fabric::endpoint* ep = nullptr;
  for (auto& f : st.book->fabrics) {
    auto* e = dynamic_cast<transports::fabric::endpoint*>(f.ep.get());
    if (e != nullptr && (ep == nullptr || e->pool().lent() < ep->pool().lent())) {
      ep = e;
      path = &f;
    }
  }
  if (ep == nullptr)
    return decline(errc::unavailable,
                   "this node runs no fabric endpoint (rw-node --fabric)");
  if (b.fabric)
    return decline(errc::bad_frame, "a second fabric offer on one connection");
  if (b.shm)
    return decline(errc::bad_frame, "this worker's chunks travel through shared memory");
  if (!b.single_home)
    return decline(errc::unavailable, "the job spans several nodes: its chunks travel to "
                                      "their homes over TCP");
  protocol::fabric_offer offer;
  std::string why;
  if (protocol::decode(t.keep->bytes(), h.payload_bytes, offer, why) != errc::ok)
    return decline(errc::bad_frame, why);
  auto& mine = ep->fabric_domain().provider();
  if (offer.provider != mine)
    return decline(
      errc::unavailable,
      fmt::format("the worker runs provider '{}', this node '{}'", offer.provider, mine));
  std::shared_ptr<transports::fabric::connection> conn;
  try {
    // A slot holds any frame the worker sends: a chunk, its sparse pairs, a hyper change.
    conn = ep->open(c->peer() + " (fabric)", std::max<uint32_t>(2 * b.chunk_bytes, 4096));
    conn->bind(offer);
  } catch (const rw::error& e) {
    if (conn)
      conn->close();
    return decline(e.code(), e.what());
  }
  b.fabric = conn;
  job_binding jb;
  jb.job_id = b.job_id;
  jb.routes = b.routes;
  jb.chunk_bytes = b.chunk_bytes;
  jb.compression = b.compression;
  jb.shard_rank = b.shard_rank;
  // Adopted before the answer leaves: the worker writes only once it has the answer,
  // and frames written before the fabric poller adopts the connection are held.
  self_->send(caf::actor_cast<nic_poller_actor>(path->poller), adopt_atom::value,
              transports::connection_ptr{conn}, c, std::move(jb), b.rank);
  auto payload = protocol::encode(conn->offer());
  reply.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{payload.data(), payload.size()};
  c->send(reply, &iov, 1);
  spdlog::info(
    "fabric: job={} rank={} peer={}: on {}; it grants {} slots of {} bytes, this "
    "node {} of {}",
    b.job_id, b.rank, c->peer(), ep->describe(), offer.slot_count, offer.slot_bytes,
    conn->slot_count(), conn->offer().slot_bytes);
}

void poller_sink::challenge(const connection_ptr& c, uint32_t rank, const job_binding& jb,
                            protocol::hello_msg hello) {
  auto& b = self_->state.book->bindings[c->id()];
  b.status = binding::challenged;
  b.nonce = jb.challenge;
  b.hello = std::move(hello);
  c->admit(transports::admission::stranger); // its proof comes within the frame deadline
  auto payload = protocol::encode(protocol::challenge_msg{jb.challenge});
  frame_header reply;
  reply.kind = frame_kind::challenge;
  reply.rank = rank;
  reply.job_id = jb.job_id;
  reply.payload_bytes = static_cast<uint32_t>(payload.size());
  iovec iov{payload.data(), payload.size()};
  c->send(reply, &iov, 1);
}

void poller_sink::on_proof(const connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  auto& st = self_->state;
  auto& b = st.book->bindings[c->id()];
  protocol::proof_msg proof;
  std::string why;
  if (decode(t.dst, h.payload_bytes, proof, why) != errc::ok) {
    st.book->bindings.erase(c->id());
    refuse(c, h, errc::bad_frame, why);
    return;
  }
  auto hello = std::move(b.hello);
  proof_request req{hello_request{hello, c->peer()}, std::move(b.nonce),
                    std::move(proof.mac)};
  b = binding{}; // joining again, until the coordinator answers
  c->admit(transports::admission::waiting);
  join(c, hello.rank,
       self_->request(st.book->coordinator, proof_timeout, proof_atom::value,
                      std::move(req)),
       std::move(hello));
}

void poller_sink::on_hyper(const connection_ptr& c, const frame_header& h,
                           payload_target& t) {
  auto& st = self_->state;
  frame_header reply;
  reply.kind = frame_kind::hyper;
  reply.job_id = h.job_id;
  reply.rank = h.rank;
  auto answer = [](const connection_ptr& conn, frame_header r, errc code,
                   const std::string& message) {
    r.error_code = code;
    auto payload = protocol::encode(protocol::error_msg{code, message, {}});
    r.payload_bytes = static_cast<uint32_t>(payload.size());
    iovec iov{payload.data(), payload.size()};
    conn->send(r, &iov, 1);
  };
  hyper_change change;
  std::string why;
  if (protocol::decode(t.keep->bytes(), h.payload_bytes, change, why) != errc::ok)
    return answer(c, reply, errc::bad_frame, "hyper: " + why);
  if (h.rank != 0)
    return answer(
      c, reply, errc::bad_rank,
      fmt::format("only rank 0 changes the job's hyper-parameters (this is rank "
                  "{})",
                  h.rank));
  if (auto bad = validate(change); !bad.empty())
    return answer(c, reply, errc::invalid_spec, "hyper: " + bad);
  spdlog::info("hyper-parameters: job id={} rank 0 at {} asks for {}", h.job_id,
               c->peer(), describe(change));
  auto self = self_;
  auto conn = c;
  // Two rounds over the job's nodes, each bounded: the cluster's answer or a timeout.
  self_
    ->request(st.book->coordinator, std::chrono::seconds(60), hyper_atom::value, h.job_id,
              change)
    .then(
      [conn, reply](uint64_t reached) mutable {
        reply.clock = reached;
        conn->send(reply);
      },
      [self, conn, reply, answer](caf::error& err) {
        auto code = err.category() == caf::atom("rw") ? static_cast<errc>(err.code())
                                                      : errc::unavailable;
        answer(conn, reply, code, describe(self->system(), err));
      });
}

void poller_sink::on_locate(const connection_ptr& c, const frame_header& h) {
  auto& st = self_->state;
  auto self = self_;
  auto conn = c;
  // A stranger waits for the answer (it may be quiet meanwhile), then is one again.
  auto b = st.book->bindings.find(c->id());
  const bool stranger = b == st.book->bindings.end()
                        || b->second.status != binding::joined;
  if (stranger) {
    // Answers queue for a peer that may read none of them: one at a time, a few each.
    auto& asked = st.book->locates[c->id()];
    if (asked.pending || asked.count >= defaults::max_stranger_locates) {
      refuse(c, h, errc::too_many_requests,
             asked.pending ? "a locate while the last one is being answered: wait for "
                             "its located frame"
                           : fmt::format("a connection that has not joined a job asks "
                                         "locate {} times at most: connect again",
                                         defaults::max_stranger_locates));
      return;
    }
    ++asked.count;
    asked.pending = true;
    c->admit(transports::admission::waiting);
  }
  auto answered = [self, conn, stranger] {
    if (!stranger)
      return;
    conn->admit(transports::admission::stranger);
    if (auto it = self->state.book->locates.find(conn->id());
        it != self->state.book->locates.end())
      it->second.pending = false;
  };
  self_->request(st.book->coordinator, hello_timeout, locate_atom::value)
    .then(
      [self, conn, answered](std::string& address, std::string& door) {
        answered();
        frame_header reply;
        if (address.empty()) {
          conn->send_error(errc::unavailable,
                           "this node has not reached its cluster coordinator yet; "
                           "try again shortly",
                           reply);
          return;
        }
        auto payload = protocol::encode(protocol::located_msg{
          address, self->state.settings.node_name, "rack-agg", door});
        reply.kind = frame_kind::located;
        reply.payload_bytes = static_cast<uint32_t>(payload.size());
        iovec iov{payload.data(), payload.size()};
        conn->send(reply, &iov, 1);
      },
      [self, conn, answered](caf::error& err) {
        answered();
        conn->send_error(errc::internal,
                         "the node could not say where its coordinator is: "
                           + self->system().render(err),
                         frame_header{});
      });
}

void poller_sink::on_attach(const connection_ptr& c, const frame_header& h,
                            payload_target& t) {
  auto& st = self_->state;
  protocol::attach_msg proof;
  std::string why;
  if (decode(t.dst, h.payload_bytes, proof, why) != errc::ok) {
    refuse(c, h, errc::unauthorized,
           "an attach whose AttachProof does not decode: " + why);
    return;
  }
  st.book->bindings[c->id()] = binding{};
  c->admit(transports::admission::waiting);
  join(c, h.rank,
       self_->request(st.book->coordinator, hello_timeout, attach_atom::value,
                      attach_request{h.job_id, h.rank, std::move(proof.nonce),
                                     std::move(proof.mac), c->peer()}));
}

// Completes a hello or attach: binds the connection and sends the welcome, or sends
// the refusal.
template <class Handle>
void poller_sink::join(const connection_ptr& conn, uint32_t rank, Handle pending,
                       protocol::hello_msg hello) {
  auto self = self_;
  auto* sink = this;
  pending.then(
    [=](job_binding& jb) {
      auto& st = self->state;
      auto it = st.book->bindings.find(conn->id());
      frame_header reply;
      reply.rank = rank;
      reply.job_id = jb.job_id;
      if (jb.code != errc::ok) {
        if (it != st.book->bindings.end())
          st.book->bindings.erase(it);
        conn->admit(transports::admission::stranger);
        conn->send_error(jb.code, jb.message, reply, jb.candidates);
        // A refused hello counts as a refused frame: a peer that has proven nothing
        // does not get to ask again and again on one connection.
        if (++st.book->strikes[conn->id()] >= defaults::max_stranger_refusals)
          conn->close();
        return;
      }
      if (it == st.book->bindings.end()) { // closed while joining
        if (jb.challenge.empty())
          self->send(st.book->coordinator, leave_atom::value, jb.job_id, rank, false,
                     conn->peer() + ": closed while joining");
        return;
      }
      if (!jb.challenge.empty()) {
        sink->challenge(conn, rank, jb, std::move(hello));
        return;
      }
      it->second = binding::joined_as(jb.job_id, rank, jb.routes, jb.chunk_bytes,
                                      jb.compression, jb.spec ? jb.spec->name : "");
      conn->admit(transports::admission::joined);
      st.book->strikes.erase(conn->id());
      it->second.shard_rank = jb.shard_rank;
      it->second.conn = conn;
      it->second.shm = sink->adopt_shm(conn, jb, hello);
      it->second.single_home = jb.layout.nodes.size() <= 1 || is_hierarchical(jb.layout);
      protocol::welcome_msg w;
      w.shm = it->second.shm != nullptr;
      if (w.shm)
        sink->offer_shm(w, jb);
      // Fabric is offered where the worker's chunks all come here (as for shm), to a
      // worker that did not take shared memory.
      if (!st.book->fabrics.empty() && it->second.single_home && !w.shm
          && rank != protocol::mirror_rank)
        w.fabric = static_cast<transports::fabric::endpoint&>(
                     *st.book->fabrics.front().ep)
                     .fabric_domain()
                     .provider();
      w.job_id = jb.job_id;
      w.node_name = st.settings.node_name;
      w.created = jb.created;
      w.endpoints = st.settings.endpoints;
      w.endpoint_index = st.settings.endpoint_index;
      w.num_shards = jb.routes->num_shards();
      w.shard_endpoints = jb.routes->shard_endpoints();
      w.token = jb.token;
      w.resume_clock = jb.resume_clock;
      if (jb.spec)
        w.spec = *jb.spec;
      if (jb.layout.nodes.size() > 1 && jb.layout.reduction == "flat") {
        w.job_nodes = jb.layout.addresses;
        w.job_node_names = jb.layout.nodes;
        w.node_index = jb.node_index;
        w.ring_vnodes = jb.layout.vnodes;
        w.ring_version = jb.layout.ring_version;
        w.replicas = jb.layout.replicas;
      }
      auto payload = protocol::encode(w);
      reply.kind = frame_kind::welcome;
      reply.payload_bytes = static_cast<uint32_t>(payload.size());
      iovec iov{payload.data(), payload.size()};
      conn->send(reply, &iov, 1);
    },
    [=](caf::error& err) {
      auto& st = self->state;
      st.book->bindings.erase(conn->id());
      conn->admit(transports::admission::stranger);
      auto msg = "the node could not admit the worker: " + self->system().render(err);
      spdlog::error("join failed: peer={}: {}", conn->peer(), msg);
      frame_header reply;
      reply.rank = rank;
      conn->send_error(errc::internal, msg, reply);
    });
}

} // namespace rw::actors::detail
