#include "actors/poller/nic_poller.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/poller/sink.hpp"
#include "protocol/half.hpp"
#include "protocol/sparse.hpp"
#include "runtime/thread_cpu.hpp"
#include "runtime/trace.hpp"
#include "transports/fabric/connection.hpp"
#include "transports/shm/connection.hpp"

namespace rw::actors {

namespace {

using detail::binding;
using detail::poller_ptr;
using detail::poller_sink;

// Serves a connection another poller set up for a joined worker (its shm segment or
// fabric connection), bound as `b`; one that cannot be adopted is closed, with the
// TCP connection it came with.
void adopt(poller_ptr self, const transports::connection_ptr& conn, binding b,
           const char* what) {
  auto& st = self->state;
  auto job = b.job_id;
  auto rank = b.rank;
  auto tcp = b.tcp;
  st.book->bindings[conn->id()] = std::move(b);
  try {
    st.ep->adopt(conn);
    spdlog::info("{} adopted: job={} rank={} peer={}", what, job, rank, conn->peer());
  } catch (const std::exception& e) {
    spdlog::error("cannot adopt {}: {}", conn->peer(), e.what());
    st.book->bindings.erase(conn->id());
    conn->close();
    if (tcp)
      tcp->close();
  }
}

nic_poller_actor::behavior_type poller_behavior(
  poller_ptr self, poller_settings settings, std::shared_ptr<transports::endpoint> ep,
  rack_coordinator_actor coordinator, std::vector<chunk_shard_actor> shards,
  std::shared_ptr<detail::poller_book> book) {
  auto& st = self->state;
  st.settings = std::move(settings);
  st.ep = std::move(ep);
  st.book = std::move(book);
  bool adopted = st.book->incarnation++ > 0;
  if (!adopted) { // a successor keeps the handles its predecessor had learnt
    st.book->coordinator = std::move(coordinator);
    st.book->shards = std::move(shards);
  }
  st.sink = std::make_unique<poller_sink>(self);
  runtime::name_this_thread(st.settings.thread_name.empty()
                              ? "rw-poll-" + std::to_string(st.settings.endpoint_index)
                              : st.settings.thread_name);
  if (st.settings.topo) {
    try {
      st.settings.topo->pin_current_thread(st.settings.core);
    } catch (const std::exception& e) {
      spdlog::error("poller {}: {}", st.ep->describe(), e.what());
      self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
      return nic_poller_actor::behavior_type::make_empty_behavior();
    }
  }
  if (adopted)
    spdlog::warn("poller of {} (restart {}) took over its predecessor's {} connection "
                 "binding(s)",
                 st.ep->describe(), st.book->incarnation - 1, st.book->bindings.size());
  if (st.settings.prealloc_buffers > 0 && !adopted)
    st.book->pools[defaults::chunk_bytes] = std::make_unique<runtime::buffer_pool>(
      defaults::chunk_bytes, st.settings.prealloc_buffers, st.settings.numa);
  self->send(self, poll_atom::value);
  return {
    [=](poll_atom) {
      auto& st = self->state;
      if (st.stopping)
        return;
      int block = self->mailbox().empty() ? st.settings.block_ms : 0;
      auto begin = runtime::trace::on() ? runtime::trace::now_ns() : 0;
      auto handled = st.ep->poll(block, *st.sink);
      st.sink->flush();
      if (begin != 0 && handled > 0) // a round that read something (the wait included)
        runtime::trace::complete("poll round", "poller", begin);
      resume_reading(self);
      release_idle_buffers(self);
      end_overdue_probes(self);
      self->send(self, poll_atom::value);
    },
    [=](stop_atom) {
      auto& st = self->state;
      st.stopping = true;
      auto where = st.ep->describe();
      st.ep->close_all(*st.sink);
      spdlog::info("endpoint closed: {}", where);
      self->quit();
    },
    [=](stats_atom) {
      auto& st = self->state;
      poller_stats s;
      s.cpu = runtime::current_cpu();
      s.affinity = runtime::current_affinity();
      for (auto& [bytes, pool] : st.book->pools) {
        s.buffers += pool->allocated();
        if (s.buffer_numa < 0 && pool->allocated() > 0)
          s.buffer_numa = runtime::numa_node_of(pool->acquire()->bytes());
      }
      s.connections = st.ep->connection_count();
      s.endpoint = st.ep->describe();
      s.frames_in = st.book->frames_in;
      s.bytes_in = st.book->bytes_in;
      s.refused = st.book->refused;
      return s;
    },
    [=](shm_atom, caf::actor& shm_poller, const std::string& bell,
        std::shared_ptr<transports::shm::handover>& handover) {
      self->state.book->shm_poller = std::move(shm_poller);
      self->state.book->shm_bell = bell;
      self->state.book->shm_handover = std::move(handover);
    },
    [=](adopt_atom, transports::connection_ptr& conn, job_binding& jb, uint32_t rank) {
      auto b = binding::joined_as(jb.job_id, rank, jb.routes, jb.chunk_bytes,
                                  jb.compression, jb.spec ? jb.spec->name : "");
      b.shard_rank = jb.shard_rank;
      b.shm_companion = true;
      adopt(self, conn, std::move(b), "shared memory");
    },
    [=](fabric_atom, caf::actor& poller, std::shared_ptr<transports::endpoint>& ep) {
      self->state.book->fabrics.push_back({std::move(poller), std::move(ep)});
    },
    [=](adopt_atom, transports::connection_ptr& conn, transports::connection_ptr& tcp,
        job_binding& jb, uint32_t rank) {
      auto b = binding::joined_as(jb.job_id, rank, jb.routes, jb.chunk_bytes,
                                  jb.compression, jb.spec ? jb.spec->name : "");
      b.shard_rank = jb.shard_rank;
      b.conn = conn; // resend and reroute frames travel on it, as the worker's data does
      b.tcp = tcp;
      adopt(self, conn, std::move(b), "fabric connection");
    },
    [=](reroute_atom, route_change& rc) {
      auto& st = self->state;
      std::vector<transports::connection_ptr> told;
      for (auto& [id, b] : st.book->bindings) {
        if (b.status != binding::joined || b.job_id != rc.job_id)
          continue;
        if (rc.routes && rc.routes != b.routes) {
          b.previous = b.routes;
          b.routes = rc.routes;
        }
        if (rc.payload.empty() || b.shm_companion || b.fabric || !b.conn
            || !b.conn->is_open())
          continue; // new routes only: the reroute frame comes once every node has them
        protocol::frame_header h;
        h.kind = protocol::frame_kind::reroute;
        h.job_id = b.job_id;
        h.rank = b.rank;
        h.payload_bytes = static_cast<uint32_t>(rc.payload.size());
        iovec iov{rc.payload.data(), rc.payload.size()};
        if (b.conn->send(h, &iov, 1))
          told.push_back(b.conn);
      }
      if (rc.close)
        for (auto& c : told)
          c->close();
      if (!rc.payload.empty())
        spdlog::info(
          "endpoint {}: job {}: {} worker connection(s) told the job's new nodes{}",
          st.ep->describe(), rc.job_id, told.size(),
          rc.close ? " and closed (the job left this node)" : "");
      return ok_atom::value;
    },
    [=](cut_atom, uint32_t job_id, uint32_t rank) {
      uint32_t cut = 0;
      for (auto& [id, b] : self->state.book->bindings)
        if (b.status == binding::joined && b.job_id == job_id
            && (rank == UINT32_MAX || b.rank == rank) && b.conn && b.conn->is_open()) {
          b.conn->close();
          ++cut;
        }
      return cut;
    },
    [=](replace_atom, uint32_t index, chunk_shard_actor& shard) {
      auto& st = self->state;
      if (index >= st.book->shards.size())
        return;
      st.book->shards[index] = std::move(shard);
      // Requests queued for the dead shard died with it: each worker re-sends what is
      // still unanswered for the chunks that shard serves.
      size_t told = 0;
      for (auto& [id, b] : st.book->bindings) {
        if (b.status != binding::joined || b.shm_companion || b.fabric || !b.conn
            || !b.conn->is_open())
          continue;
        protocol::frame_header h;
        h.kind = protocol::frame_kind::resend;
        h.job_id = b.job_id;
        h.rank = b.rank;
        // A worker knows a chunk's first shard only: once chunks moved between shards
        // (in-node balancing), it re-sends everything unanswered (repeats are dropped).
        h.chunk_index = b.routes && b.routes->is_remapped() ? UINT32_MAX : index;
        told += b.conn->send(h) ? 1 : 0;
      }
      spdlog::info(
        "endpoint {}: shard {} was restarted; {} worker connection(s) asked to "
        "re-send what it had not answered",
        st.ep->describe(), index, told);
    },
  };
}

} // namespace

std::shared_ptr<detail::poller_book> make_poller_book() {
  return std::make_shared<detail::poller_book>();
}

nic_poller_actor spawn_nic_poller(caf::actor_system& sys, poller_settings settings,
                                  std::shared_ptr<transports::endpoint> ep,
                                  rack_coordinator_actor coordinator,
                                  std::vector<chunk_shard_actor> shards,
                                  std::shared_ptr<detail::poller_book> book) {
  return sys.spawn<caf::detached>(poller_behavior, std::move(settings), std::move(ep),
                                  std::move(coordinator), std::move(shards),
                                  book ? std::move(book) : make_poller_book());
}

} // namespace rw::actors
