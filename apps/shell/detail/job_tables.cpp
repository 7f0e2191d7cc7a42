#include "apps/shell/detail/job_tables.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <lua.hpp>

namespace rw::shell::detail {

namespace {

void set(lua_State* L, const char* key, uint64_t value) {
  lua_pushinteger(L, static_cast<lua_Integer>(value));
  lua_setfield(L, -2, key);
}

void set(lua_State* L, const char* key, const std::string& value) {
  lua_pushlstring(L, value.data(), value.size());
  lua_setfield(L, -2, key);
}

void set_bool(lua_State* L, const char* key, bool value) {
  lua_pushboolean(L, value);
  lua_setfield(L, -2, key);
}

// A float32 as the double of its shortest decimal form: 0.01f reads as 0.01.
void set_float(lua_State* L, const char* key, float value) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf - 1, value);
  *res.ptr = '\0';
  lua_pushnumber(L, res.ec == std::errc{} ? std::strtod(buf, nullptr) : value);
  lua_setfield(L, -2, key);
}

void set_strings(lua_State* L, const char* key, const std::vector<std::string>& values) {
  lua_createtable(L, static_cast<int>(values.size()), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    lua_pushlstring(L, values[i].data(), values[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, key);
}

void push_optimizer(lua_State* L, const optimizer_spec& o) {
  lua_createtable(L, 0, 9);
  set(L, "kind", std::string(to_string(o.kind)));
  set_float(L, "lr", o.learning_rate);
  set_float(L, "momentum", o.momentum);
  set_float(L, "beta1", o.beta1);
  set_float(L, "beta2", o.beta2);
  set_float(L, "epsilon", o.epsilon);
  set_float(L, "weight_decay", o.weight_decay);
  set_float(L, "rescale", o.rescale);
  set_float(L, "eta", o.eta);
}

// The chunks of one step of the job: every tensor's, each chunk pushed and pulled once
// per step (0 while no worker has declared the tensors).
uint64_t chunks_per_step(const job_spec& spec) {
  uint64_t n = 0;
  for (auto& t : spec.tensors)
    n += (t.elements * sizeof(float) + spec.chunk_bytes - 1)
         / std::max<uint32_t>(spec.chunk_bytes, 1);
  return n;
}

void set_ms(lua_State* L, const char* key, double ms) {
  lua_pushnumber(L, ms);
  lua_setfield(L, -2, key);
}

void push_rank(lua_State* L, const actors::rank_report& r, uint64_t chunks,
               const actors::rank_lateness* late) {
  lua_createtable(L, 0, 17);
  set(L, "rank", uint64_t{r.rank});
  set(L, "state", r.state);
  set(L, "peer", r.peer);
  set(L, "clock", r.clock);
  // In steps, as a training loop counts: whole steps' worth of chunk pushes and pulls.
  set(L, "steps_pushed", chunks ? r.pushes / chunks : 0);
  set(L, "steps_pulled", chunks ? r.pulls / chunks : 0);
  // Per chunk: the messages themselves.
  set(L, "pushes", r.pushes);
  set(L, "pulls", r.pulls);
  set(L, "bytes_in", r.bytes_in);
  set(L, "bytes_out", r.bytes_out);
  lua_pushnumber(L, static_cast<double>(r.wait_us) / 1000.0);
  lua_setfield(L, -2, "wait_ms");
  actors::rank_lateness none;
  auto& l = late != nullptr ? *late : none;
  set_ms(L, "late_ms", static_cast<double>(l.recent_us) / 1000.0);
  set_ms(L, "late_last_ms", static_cast<double>(l.last_us) / 1000.0);
  set_ms(L, "late_max_ms", static_cast<double>(l.max_us) / 1000.0);
  set(L, "late_steps", l.steps);
  set(L, "waited_ms", l.waited_ms);
  set(L, "missing_chunks", l.missing_chunks);
}

const actors::rank_lateness* lateness_of(const actors::job_report& job, uint32_t rank) {
  for (auto& l : job.lateness)
    if (l.rank == rank)
      return &l;
  return nullptr;
}

// A rank counts as late from 1 ms a step: below it, scheduling noise.
constexpr uint64_t late_floor_us = 1000;

} // namespace

std::vector<actors::rank_lateness> slowest_ranks(const actors::job_report& job,
                                                 size_t n) {
  std::vector<actors::rank_lateness> out;
  for (auto& l : job.lateness)
    if (l.recent_us >= late_floor_us || l.waited_ms != 0)
      out.push_back(l);
  std::sort(out.begin(), out.end(),
            [](const actors::rank_lateness& a, const actors::rank_lateness& b) {
              if (a.waited_ms != b.waited_ms)
                return a.waited_ms > b.waited_ms;
              return a.recent_us != b.recent_us ? a.recent_us > b.recent_us
                                                : a.rank < b.rank;
            });
  if (out.size() > n)
    out.resize(n);
  return out;
}

std::string lateness_text(const actors::job_report& job) {
  auto slow = slowest_ranks(job, 3);
  if (slow.empty())
    return {};
  std::string out = "slowest ranks: ";
  for (size_t i = 0; i < slow.size(); ++i)
    out += fmt::format("{}{} ({:.1f} ms late a step)", i ? ", " : "", slow[i].rank,
                       static_cast<double>(slow[i].recent_us) / 1000.0);
  for (auto& l : slow)
    if (l.waited_ms != 0)
      out += fmt::format("; a step has waited {} ms for rank {} ({} chunk{} missing)",
                         l.waited_ms, l.rank, l.missing_chunks,
                         l.missing_chunks == 1 ? "" : "s");
  return out;
}

job_totals totals_of(const actors::job_report& job) {
  job_totals t;
  if (!job.ranks.empty())
    t.clock_min = job.ranks.front().clock;
  for (auto& r : job.ranks) {
    t.clock_min = std::min(t.clock_min, r.clock);
    t.clock_max = std::max(t.clock_max, r.clock);
    t.pushes += r.pushes;
    t.pulls += r.pulls;
    t.bytes_in += r.bytes_in;
    t.bytes_out += r.bytes_out;
    t.wait_us += r.wait_us;
  }
  return t;
}

void push_node(lua_State* L, const actors::node_info& n) {
  lua_createtable(L, 0, 12);
  set(L, "id", uint64_t{n.id});
  set(L, "name", n.name);
  set(L, "role", n.role);
  set(L, "rack", n.rack);
  set_strings(L, "endpoints", n.endpoints);
  lua_pushnumber(L, n.uplink_gbps);
  lua_setfield(L, -2, "uplink_gbps");
  lua_pushnumber(L, n.core_gbps);
  lua_setfield(L, -2, "core_gbps");
  lua_pushnumber(L,
                 n.nic_gbps); // what its NIC reports (0: nothing), for auto's agg links
  lua_setfield(L, -2, "nic_gbps");
  set(L, "nic", n.nic);
  set(L, "shards", uint64_t{n.shards});
  set(L, "jobs", uint64_t{n.jobs});
  set(L, "last_seen_ms", n.last_seen_ms);
}

void push_job(lua_State* L, const actors::job_report& job) {
  lua_createtable(L, 0, 25);
  set(L, "id", uint64_t{job.id});
  set(L, "name", job.name);
  set(L, "state", job.state);
  set(L, "reason", job.reason);
  set(L, "node", job.node);
  set_strings(L, "endpoints", job.endpoints);
  set_strings(L, "nodes", job.layout.nodes);
  set_strings(L, "node_endpoints", job.layout.addresses);
  set_strings(L, "racks", job.layout.racks);
  set(L, "ring_version", job.layout.ring_version);
  set(L, "replicas", job.layout.replicas);
  set(L, "reduction", job.layout.reduction);
  set(L, "plan", job.layout.plan);
  // Hierarchical: each rank's rack, once known (a job placed at join: once every rank
  // has said hello).
  std::vector<std::string> rank_racks;
  for (auto k : job.layout.rank_racks)
    rank_racks.push_back(k < job.layout.racks.size() ? job.layout.racks[k]
                                                     : std::string{"?"});
  set_strings(L, "rank_racks", rank_racks);
  set(L, "workers", uint64_t{job.spec.num_workers});
  set(L, "consistency", to_string(job.spec.consistency));
  set(L, "compression", to_string(job.spec.compression));
  lua_pushboolean(L, job.spec.compression.updates);
  lua_setfield(L, -2, "compress_updates");
  push_optimizer(L, job.spec.optimizer);
  lua_setfield(L, -2, "optimizer");
  set(L, "chunk_bytes", uint64_t{job.spec.chunk_bytes});
  set(L, "memory", job.max_memory); // 0: the nodes' own limit
  lua_createtable(L, static_cast<int>(job.spec.tensors.size()), 0);
  for (size_t i = 0; i < job.spec.tensors.size(); ++i) {
    auto& t = job.spec.tensors[i];
    lua_createtable(L, 0, 3);
    set(L, "name", t.name);
    set(L, "elements", t.elements);
    set_bool(L, "has_init", t.has_init);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "tensors");
  set(L, "created_unix_ms", job.created_unix_ms);
  set(L, "started_unix_ms", job.started_unix_ms);
  set(L, "ended_unix_ms", job.ended_unix_ms);
  lua_createtable(L, static_cast<int>(job.ranks.size()), 0);
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    push_rank(L, job.ranks[i], chunks_per_step(job.spec),
              lateness_of(job, job.ranks[i].rank));
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "ranks");
  auto t = totals_of(job);
  set(L, "chunks_per_step", chunks_per_step(job.spec));
  set(L, "clock_min", t.clock_min);
  set(L, "clock_max", t.clock_max);
  set(L, "pushes", t.pushes);
  set(L, "pulls", t.pulls);
  set(L, "bytes_in", t.bytes_in);
  set(L, "bytes_out", t.bytes_out);
  lua_pushnumber(L, static_cast<double>(t.wait_us) / 1000.0);
  lua_setfield(L, -2, "wait_ms");
  auto slow = slowest_ranks(job, 3);
  lua_createtable(L, static_cast<int>(slow.size()), 0);
  for (size_t i = 0; i < slow.size(); ++i) {
    lua_pushinteger(L, static_cast<lua_Integer>(slow[i].rank));
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "slowest");
}

} // namespace rw::shell::detail
