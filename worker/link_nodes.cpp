// worker_link's nodes (worker/link.hpp): a reroute (the job's ring changed: routes by
// it, joining a node it adds), and saying hello again to a node whose connections
// closed under a running worker. All run on the receiver thread; joins and hellos
// again run between two polls of the endpoint, frames on the other connections going
// on being handled while a node answers (job_join.hpp join_node).

#include "worker/link.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "protocol/control.hpp"

namespace rw::actors {

namespace {

using steady_clock = std::chrono::steady_clock;

int64_t ms_since(steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - t)
    .count();
}

// How often a node that is down is said hello to again.
constexpr auto reconnect_every = std::chrono::milliseconds(100);

} // namespace

void worker_link::set_nodes(const std::vector<std::string>& conn_nodes,
                            const std::vector<std::string>& addresses) {
  nodes_.clear();
  for (uint32_t e = 0; e < conn_nodes.size(); ++e) {
    if (!nodes_.empty() && nodes_.back().name == conn_nodes[e])
      continue;
    auto k = nodes_.size();
    nodes_.push_back(
      {conn_nodes[e], k < addresses.size() ? addresses[k] : std::string{}, e});
  }
}

size_t worker_link::node_for(uint32_t conn) const {
  size_t k = 0;
  while (k + 1 < nodes_.size() && nodes_[k + 1].base <= conn)
    ++k;
  return k;
}

std::pair<uint32_t, uint32_t> worker_link::conn_range(size_t node) const {
  auto end = node + 1 < nodes_.size() ? nodes_[node + 1].base
                                      : static_cast<uint32_t>(conns()->size());
  return {nodes_[node].base, end};
}

void worker_link::on_reroute(uint32_t conn, const std::vector<std::byte>& payload) {
  protocol::reroute_msg msg;
  std::string why;
  if (decode(payload.data(), payload.size(), msg, why) != errc::ok) {
    spdlog::warn("worker rank {}: undecodable reroute frame from the node ignored: {}",
                 rank_, why);
    return;
  }
  if (pending_) {
    // Nodes are being joined (this frame came while one answered, or before the next
    // poll): a newer ring waits its turn; the frame's connection is answered after.
    if (msg.ring_version > pending_->ring_version)
      pending_ = std::move(msg);
    pending_conns_.push_back(conn);
    return;
  }
  if (msg.ring_version > ring_version_.load()) {
    if (!basis_) {
      spdlog::warn("worker rank {}: a reroute for a job on one node ignored", rank_);
      return;
    }
    for (auto& n : msg.nodes)
      if (!connected_to(n)) {
        pending_ = std::move(msg); // a node joined: said hello to after this poll
        pending_conns_.assign(1, conn);
        return;
      }
    if (!adopt_ring(msg))
      return;
  }
  // A takeover's node kept what the ring before routed to it: only what the ring
  // change moved comes again (a frame of an older ring, or of the same ring with
  // nothing kept, such as a move given up, sends again all it homes).
  bool only_moved = msg.kept_pushes && msg.ring_version == ring_version_.load();
  if (!retired(conn)) {
    events_->reroute(conn, only_moved);
  }
}

bool worker_link::adopt_ring(const protocol::reroute_msg& msg) {
  try {
    auto next = basis_->rebuild(msg.nodes, msg.ring_version, msg.replicas);
    auto list = conns();
    for (size_t n = 0; n < basis_->names.size(); ++n) {
      if (std::find(msg.nodes.begin(), msg.nodes.end(), basis_->names[n])
          != msg.nodes.end())
        continue;
      auto end = n + 1 < basis_->endpoint_base.size()
                   ? basis_->endpoint_base[n + 1]
                   : static_cast<uint32_t>(list->size());
      for (auto i = basis_->endpoint_base[n]; i < end; ++i)
        retired_[i].store(true, std::memory_order_release);
    }
    std::atomic_store(&routes_before_, routes());
    std::atomic_store(&routes_, next);
    ring_version_.store(msg.ring_version, std::memory_order_release);
    ring_nodes_ = msg.nodes;
    // A chunk without a replica on the new ring: its ack is no longer awaited.
    answers_.replicas_changed(
      [&](uint32_t t, uint32_t c) { return next->replica_of(t, c) != UINT32_MAX; });
    spdlog::info(
      "worker rank {}: job {} moved to nodes [{}] (ring version {}): chunks go "
      "to their new homes; what is unanswered is sent again",
      rank_, job_id_, fmt::join(msg.nodes, ","), msg.ring_version);
    return true;
  } catch (const std::exception& e) {
    spdlog::error("worker rank {}: cannot route by nodes [{}]: {}", rank_,
                  fmt::join(msg.nodes, ","), e.what());
    return false;
  }
}

bool worker_link::retire_node_of(uint32_t conn, std::string& name) {
  if (!multi_node_ || nodes_.empty())
    return false;
  auto k = node_for(conn);
  name = nodes_[k].name;
  auto [from, to] = conn_range(k);
  for (auto i = from; i < to; ++i)
    retired_[i].store(true, std::memory_order_release);
  return any_open();
}

bool worker_link::any_open() const {
  auto list = conns();
  for (uint32_t i = 0; i < list->size(); ++i)
    if (!retired(i) && (*list)[i]->is_open())
      return true;
  return false;
}

bool worker_link::connected_to(const std::string& node) const {
  auto at = std::find(basis_->names.begin(), basis_->names.end(), node);
  if (at == basis_->names.end())
    return false;
  return !retired(basis_->endpoint_base[at - basis_->names.begin()]);
}

void worker_link::join_pending() {
  auto msg = *pending_; // a newer reroute may replace pending_ while a node answers
  auto basis = std::make_shared<runtime::routes_basis>(*basis_);
  auto list = std::make_shared<conn_list>(*conns());
  std::vector<uint32_t> first_of_new;
  std::string failure;
  for (size_t i = 0; i < msg.nodes.size() && failure.empty(); ++i) {
    auto& node = msg.nodes[i];
    if (connected_to(node))
      continue;
    // A node the job left before (drained) comes back: its old connections stay
    // retired under another name; the new ones are the node's.
    for (auto& name : basis->names)
      if (name == node)
        name += " (left)";
    for (auto& n : nodes_)
      if (n.name == node)
        n.name += " (left)";
    if (!joiner_ || i >= msg.addresses.size()) {
      failure = fmt::format("the job's new ring adds node {} and {}", node,
                            joiner_ ? "the node sent no address for it (an older node)"
                                    : "this link cannot join a node");
      break;
    }
    try {
      auto started = std::chrono::steady_clock::now();
      auto joined = joiner_(node, msg.addresses[i], msg.ring_version, *this);
      if (list->size() + joined.conns.size() > retired_capacity_)
        throw rw::error(errc::internal, fmt::format("more than {} connections in all",
                                                    retired_capacity_));
      basis->names.push_back(node);
      basis->num_shards.push_back(joined.welcome.num_shards);
      basis->shard_endpoints.push_back(joined.welcome.shard_endpoints);
      basis->endpoint_base.push_back(static_cast<uint32_t>(list->size()));
      first_of_new.push_back(static_cast<uint32_t>(list->size()));
      nodes_.push_back({node, msg.addresses[i], static_cast<uint32_t>(list->size())});
      list->insert(list->end(), joined.conns.begin(), joined.conns.end());
      spdlog::info(
        "worker rank {}: joined node {} of job {} at {} ({} connection(s)) in {} "
        "ms",
        rank_, node, job_id_, msg.addresses[i], joined.conns.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - started)
          .count());
    } catch (const std::exception& e) {
      failure = fmt::format("cannot join node {} of the job's new ring at {}: {}", node,
                            msg.addresses[i], e.what());
    }
  }
  // A newer ring that came meanwhile stays pending, with every connection that sent a
  // reroute: it is taken after the next poll.
  bool newer = pending_->ring_version > msg.ring_version;
  std::vector<uint32_t> conns_that_sent;
  if (!newer) {
    conns_that_sent = std::move(pending_conns_);
    pending_.reset();
    pending_conns_.clear();
  }
  if (!failure.empty()) {
    spdlog::error("worker rank {}: {}", rank_, failure);
    for (auto i = conns()->size(); i < list->size(); ++i)
      (*list)[i]->close();
    abandon(failure); // the job cannot go on without that node: fail what waits
    return;
  }
  // The connections first, then the routes that use them (the proxy loads the routes,
  // then the connections).
  std::atomic_store(&conns_, std::shared_ptr<const conn_list>(std::move(list)));
  basis_ = std::move(basis);
  if (!adopt_ring(msg))
    return;
  for (auto c : conns_that_sent) {
    if (!retired(c)) {
      events_->reroute(c, false);
    }
  }
  for (auto c : first_of_new) {
    events_->reroute(c, false); // a join: its nodes kept nothing
  }
}

bool worker_link::begin_reconnect(uint32_t conn, const std::string& why) {
  if (!joiner_ || shm_ || nodes_.empty())
    return false;
  auto k = node_for(conn);
  auto& n = nodes_[k];
  if (n.address.empty())
    return false;
  auto [from, to] = conn_range(k);
  for (auto i = from; i < to; ++i)
    retired_[i].store(true, std::memory_order_release); // nothing is sent there meanwhile
  auto list = conns();
  for (auto i = from; i < to; ++i)
    (*list)[i]->close(); // so the node sees the rank away and takes it back
  n.down = true;
  n.since = n.next_try = steady_clock::now();
  n.why = why;
  reconnecting_ = true;
  spdlog::warn("worker rank {}: connection to node {} of job {} lost ({}): saying hello "
               "again as rank {} (for up to {} ms)",
               rank_, n.name, job_id_, why, rank_, defaults::reconnect_window_ms);
  return true;
}

void worker_link::reconnect_nodes() {
  bool any = false;
  for (size_t k = 0; k < nodes_.size() && !closed_.load(); ++k) {
    auto& n = nodes_[k];
    if (!n.down)
      continue;
    if (multi_node_
        && std::find(ring_nodes_.begin(), ring_nodes_.end(), n.name)
             == ring_nodes_.end()) {
      n.down = false; // the job left that node meanwhile (a takeover, a drain)
      continue;
    }
    auto now = steady_clock::now();
    if (now < n.next_try) {
      any = true;
      continue;
    }
    auto [from, to] = conn_range(k);
    try {
      auto joined = joiner_(n.name, n.address, 0, *this);
      if (joined.conns.size() != to - from) {
        for (auto& c : joined.conns)
          c->close();
        throw rw::error(errc::spec_mismatch,
                        fmt::format("it now has {} endpoint(s), not {}",
                                    joined.conns.size(), to - from));
      }
      auto list = std::make_shared<conn_list>(*conns());
      for (auto i = from; i < to; ++i)
        (*list)[i] = joined.conns[i - from];
      std::atomic_store(&conns_, std::shared_ptr<const conn_list>(std::move(list)));
      for (auto i = from; i < to; ++i)
        retired_[i].store(false, std::memory_order_release);
      n.down = false;
      spdlog::info(
        "worker rank {}: back on node {} of job {} after {} ms (lost: {}); what "
        "it serves and has not answered is sent again",
        rank_, n.name, job_id_, ms_since(n.since), n.why);
      events_->resend(from, UINT32_MAX);
    } catch (const std::exception& e) {
      bool refused = std::strstr(e.what(), std::strerror(ECONNREFUSED)) != nullptr;
      if (!refused && ms_since(n.since) < defaults::reconnect_window_ms) {
        spdlog::debug("worker rank {}: node {} not back yet: {}", rank_, n.name,
                      e.what());
        n.next_try = now + reconnect_every;
        any = true;
        continue;
      }
      n.down = false;
      give_up(n.name,
              fmt::format("connection to node {} lost ({}) and not regained in {} "
                          "ms: {}",
                          n.name, n.why, ms_since(n.since), e.what()));
    }
  }
  reconnecting_ = any;
}

void worker_link::give_up(const std::string& node, const std::string& why) {
  if (replicas_ > 0 && multi_node_ && any_open()) {
    // Its chunks' replicas take over: the nodes left send a reroute; until then what is
    // unanswered waits (bounded by the request timeout).
    spdlog::warn("worker rank {}: {}; its chunks' replicas take over: waiting for the "
                 "job's new ring",
                 rank_, why);
    return;
  }
  spdlog::error("worker rank {}: {}", rank_, why);
  lose(errc::io_error, why);
}

} // namespace rw::actors
