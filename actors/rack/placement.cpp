// Where a worker of a multi-node job belongs, as the node that got its hello sees it:
// a hierarchical job's worker at another rack's agg is sent there (errc::moved); one
// of a job placed at join has its rank bound to this rack at the cluster coordinator
// before it is admitted; a hello for a job the node does not hold is sent on to the
// job's node for the worker (or to all of them, for the worker to pick the nearest).
// The rules themselves are actors/cluster/rack_choice.

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/limited_log.hpp"
#include "actors/cluster/rack_choice.hpp"
#include "actors/rack/state.hpp"
#include "logic/log_text.hpp"

namespace rw::actors::detail {

namespace {

uint32_t index_of(const job_layout& l, const std::string& node) {
  auto it = std::find(l.nodes.begin(), l.nodes.end(), node);
  return it == l.nodes.end() ? no_node : static_cast<uint32_t>(it - l.nodes.begin());
}

placement_facts facts_of(const hello_request& req, uint32_t named) {
  placement_facts f;
  f.peer_host = host_of(req.peer);
  f.rack = req.hello.rack;
  f.picked_by = req.hello.picked_by;
  f.named = named;
  return f;
}

errc errc_of(const caf::error& err) {
  if (err.category() == caf::atom("rw"))
    return static_cast<errc>(err.code());
  return errc::unavailable;
}

job_binding moved_to(rack_ptr self, const grant_info& g, const hello_request& req,
                     uint32_t home, const std::string& why) {
  auto& l = g.layout;
  spdlog::info("worker directed: peer={} job='{}' rank={}: to its rack's agg {} at {} "
               "(rack {}): {}",
               req.peer, g.spec.name, req.hello.rank, l.nodes[home], l.addresses[home],
               l.racks[home], why);
  auto b = refuse(
    errc::moved,
    fmt::format("{} is where rank {} of job '{}' says hello: it belongs to rack "
                "{}, whose rack-agg is {} ({})",
                l.addresses[home], req.hello.rank, g.spec.name, l.racks[home],
                l.nodes[home], why));
  b.candidates = {l.addresses[home]};
  return b;
}

job_binding bad_rack_option(const grant_info& g, const hello_request& req,
                            const std::string& why) {
  log_limited(spdlog::level::warn, req.peer,
              "hello refused: peer={} job='{}' rank={}: {}",
              fmt::format("hello refused: peer={} job='{}' rank={}: {}", req.peer,
                          g.spec.name, req.hello.rank, why));
  return refuse(errc::invalid_spec, why);
}

// The worker's rank of a job placed at join is placed here: the map may be set.
void take_map(rack_ptr self, const std::string& name, const rank_map& m) {
  auto& st = self->state;
  auto g = st.grants.find(name);
  if (g == st.grants.end() || g->second.job_id != m.job_id
      || !g->second.layout.rank_racks.empty())
    return;
  g->second.layout.rank_racks = m.rank_racks;
  auto top = st.grants.find(top_job_name(name));
  if (top != st.grants.end() && !m.rank_racks.empty())
    top->second.init_rank = m.rank_racks.front();
  auto here = index_of(g->second.layout, st.settings.node_name);
  std::vector<uint32_t> mine;
  for (uint32_t r = 0; r < m.rank_racks.size(); ++r)
    if (m.rank_racks[r] == here)
      mine.push_back(r);
  spdlog::info("job '{}' id={}: every rank is placed; ranks [{}] are this rack's", name,
               m.job_id, fmt::join(mine, ","));
  auto held = std::move(g->second.held_top);
  g->second.held_top.clear();
  for (auto& h : held)
    admit(self, h.req, h.id, std::move(h.rp));
}

// Whether `m` is a whole map for grant `g`'s job.
bool valid_map(const grant_info& g, const rank_map& m) {
  if (m.job_id != g.job_id || m.rank_racks.size() != g.spec.num_workers)
    return false;
  return std::all_of(m.rank_racks.begin(), m.rank_racks.end(),
                     [&](uint32_t k) { return k < g.layout.nodes.size(); });
}

} // namespace

bool placed_at_join(const grant_info& g) {
  return is_hierarchical(g.layout) && g.layout.join_timeout_ms != 0;
}

grant_info* unmapped_parent(rack_state& st, const grant_info& top) {
  const std::string suffix = top_job_name("");
  auto& name = top.spec.name;
  if (!top.internal || name.size() <= suffix.size())
    return nullptr;
  auto parent = st.grants.find(name.substr(0, name.size() - suffix.size()));
  if (parent == st.grants.end() || !placed_at_join(parent->second)
      || !parent->second.layout.rank_racks.empty() || !parent->second.ended.empty())
    return nullptr;
  return &parent->second;
}

std::optional<job_binding> place_hello(rack_ptr self, const grant_info& g,
                                       const hello_request& req) {
  auto& l = g.layout;
  if (l.nodes.size() <= 1)
    return std::nullopt;
  auto here = index_of(l, self->state.settings.node_name);
  auto rank = req.hello.rank;
  auto facts = facts_of(req, here);
  auto choice = choose_rack(l, g.spec.name, facts);
  if (!choice.error.empty())
    return bad_rack_option(g, req, choice.error);
  if (!is_hierarchical(l))
    return std::nullopt; // a flat job's worker talks to every node
  if (!placed_at_join(g)) {
    // The job's worker_racks fixed each rank's rack at creation.
    if (rank >= l.rank_racks.size())
      return std::nullopt;
    auto home = l.rank_racks[rank];
    if (!req.hello.rack.empty() && req.hello.rack != l.racks.at(home))
      return bad_rack_option(
        g, req,
        fmt::format("rank {} of job '{}' belongs to rack {} (the job's "
                    "worker_racks), but the worker says its rack is '{}'",
                    rank, g.spec.name, l.racks[home], req.hello.rack));
    if (home == here || home >= l.nodes.size())
      return std::nullopt;
    return moved_to(self, g, req, home,
                    "a hierarchical job's worker talks to its own rack's node");
  }
  if (choice.node == no_node) {
    // Several nodes share the worker's host and nothing picks one of them: the worker
    // measures the round trips to them.
    auto to = addresses_of(l, choice.candidates);
    spdlog::info(
      "worker directed: peer={} job='{}' rank={}: to the nearest of {} by round "
      "trip: {}",
      req.peer, g.spec.name, rank, fmt::join(to, ", "), choice.reason);
    auto b = refuse(errc::moved,
                    fmt::format("{} or another node of job '{}' ({}): say hello at the "
                                "nearest ({})",
                                to.front(), g.spec.name, fmt::join(to, ", "),
                                choice.reason));
    b.candidates = std::move(to);
    return b;
  }
  if (choice.node != here)
    return moved_to(self, g, req, choice.node, choice.reason);
  spdlog::info("worker placed: peer={} job='{}' rank={} rack={} node={}: {}", req.peer,
               g.spec.name, rank, l.racks[here], self->state.settings.node_name,
               choice.reason);
  return std::nullopt;
}

void bind_then_admit(rack_ptr self, const hello_request& req, uint32_t id,
                     binding_promise rp) {
  auto& st = self->state;
  auto& name = req.hello.spec.name;
  auto& g = st.grants.at(name);
  auto here = index_of(g.layout, st.settings.node_name);
  auto choice = choose_rack(g.layout, name, facts_of(req, here));
  if (!st.link) {
    rp.deliver(refuse(errc::unavailable, "this node is not in a cluster: it cannot place "
                                         "the ranks of a job placed at join"));
    return;
  }
  rank_binding b{id, req.hello.rank, here, choice.reason};
  auto timeout = std::chrono::milliseconds(g.layout.join_timeout_ms)
                 + 2 * std::chrono::milliseconds(defaults::node_request_timeout_ms);
  self->request(st.link, timeout, bind_atom::value, std::move(b))
    .then(
      [self, req, id, rp](rank_map& m) mutable {
        auto& st = self->state;
        auto g = st.grants.find(req.hello.spec.name);
        if (g == st.grants.end() || g->second.job_id != id || !g->second.ended.empty()) {
          rp.deliver(
            refuse(errc::unknown_job,
                   fmt::format("job '{}' ended while its ranks were being placed",
                               req.hello.spec.name)));
          return;
        }
        if (!valid_map(g->second, m)) {
          rp.deliver(refuse(errc::internal, "the coordinator's rank -> rack map does not "
                                            "fit the job"));
          return;
        }
        take_map(self, req.hello.spec.name, m);
        admit(self, req, id, std::move(rp));
      },
      [self, req, rp](caf::error& err) mutable {
        auto why = describe(self->system(), err);
        log_limited(spdlog::level::warn, req.peer,
                    "hello refused: peer={} job='{}' rank={}: {}",
                    fmt::format("hello refused: peer={} job='{}' rank={}: {}", req.peer,
                                req.hello.spec.name, req.hello.rank, why));
        rp.deliver(refuse(errc_of(err), why));
      });
}

caf::result<job_binding> send_on(rack_ptr self, const hello_request& req,
                                 job_binding refusal) {
  auto& st = self->state;
  auto& name = req.hello.spec.name;
  auto log_refusal = [req] {
    log_limited(
      spdlog::level::warn, req.peer,
      "hello refused: peer={} job='{}' rank={}: no such job on this node",
      fmt::format("hello refused: peer={} job='{}' rank={}: no such job on this node",
                  req.peer, req.hello.spec.name, req.hello.rank));
  };
  if (!st.link) {
    log_refusal();
    return refusal;
  }
  auto rp = self->make_response_promise<job_binding>();
  self
    ->request(st.link, std::chrono::milliseconds(defaults::node_request_timeout_ms),
              where_atom::value, name)
    .then(
      [self, req, rp](job_layout& l) mutable {
        std::string why;
        auto& st = self->state;
        auto answer = send_elsewhere(l, req.hello.spec.name, req.hello.rank,
                                     facts_of(req, no_node), st.settings.node_name, why);
        spdlog::info(
          "worker sent on: peer={} job='{}' rank={}: node {} does not hold the "
          "job; to {}: {}",
          req.peer, loggable(req.hello.spec.name), req.hello.rank, st.settings.node_name,
          fmt::join(answer.candidates, ", "), loggable(why, 512));
        auto b = refuse(answer.code, answer.message);
        b.candidates = answer.candidates;
        rp.deliver(std::move(b));
      },
      [rp, refusal, log_refusal](caf::error&) mutable {
        log_refusal();
        rp.deliver(refusal);
      });
  return rp;
}

} // namespace rw::actors::detail
