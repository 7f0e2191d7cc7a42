#include "runtime/placement.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rw::runtime {

namespace {

std::vector<core_info> allowed_cores(const topology& topo, const placement_request& req) {
  for (auto n : req.numa)
    if (topo.numa(n) == nullptr) {
      std::vector<uint32_t> have;
      for (auto& d : topo.numa_nodes())
        have.push_back(d.os_index);
      throw std::runtime_error(fmt::format(
        "NUMA domain {} does not exist on this machine (it has [{}])", n, fmt::join(have, ", ")));
    }
  std::vector<core_info> out;
  if (!req.cores.empty()) {
    for (auto cpu : req.cores) {
      auto* c = topo.core_by_cpu(cpu);
      if (c == nullptr)
        throw std::runtime_error(fmt::format(
          "core {} does not exist (or is not a core's first hardware thread) on this "
          "{}-core machine",
          cpu, topo.cores().size()));
      out.push_back(*c);
    }
  } else {
    out = topo.cores();
  }
  if (!req.numa.empty())
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](const core_info& c) {
                               return std::find(req.numa.begin(), req.numa.end(), c.numa)
                                      == req.numa.end();
                             }),
              out.end());
  if (out.empty())
    throw std::runtime_error("the configured cores and NUMA domains leave no core to use");
  return out;
}

} // namespace

endpoint_place resolve_endpoint(const topology& topo, const std::string& listen) {
  auto pos = listen.rfind(':');
  if (pos == std::string::npos)
    throw std::runtime_error(fmt::format("'{}' is not HOST:PORT", listen));
  auto host = listen.substr(0, pos);
  auto port = listen.substr(pos + 1);
  endpoint_place e;
  e.listen = listen;
  if (host.empty() || host == "0.0.0.0" || host == "*")
    return e; // every interface: no single NIC
  if (auto* nic = topo.nic(host)) {
    if (nic->ipv4.empty())
      throw std::runtime_error(
        fmt::format("network device '{}' has no IPv4 address to listen on", host));
    e.listen = nic->ipv4.front() + ":" + port;
    e.nic = nic->name;
    e.nic_numa_known = nic->numa_known;
    e.poller.numa = nic->numa;
    return e;
  }
  in_addr probe{};
  if (inet_pton(AF_INET, host.c_str(), &probe) == 1) {
    auto* nic = topo.nic_for_address(host);
    if (nic == nullptr) {
      std::vector<std::string> have;
      for (auto& n : topo.nics())
        for (auto& a : n.ipv4)
          have.push_back(n.name + " " + a);
      throw std::runtime_error(fmt::format(
        "no network device here has address {} (devices: {})", host, fmt::join(have, ", ")));
    }
    e.nic = nic->name;
    e.nic_numa_known = nic->numa_known;
    e.poller.numa = nic->numa;
    return e;
  }
  throw std::runtime_error(fmt::format(
    "'{}' is neither a network device of this machine nor an IPv4 address", host));
}

placement plan_placement(const topology& topo, const placement_request& req) {
  placement plan;
  auto cores = allowed_cores(topo, req);
  auto count = req.shards == 0 ? static_cast<uint32_t>(cores.size()) : req.shards;
  if (count > cores.size())
    throw std::runtime_error(fmt::format(
      "{} shards asked for, but only {} cores are available to them (one shard per core)",
      count, cores.size()));
  std::map<uint32_t, int> load; // os cpu -> threads placed
  for (uint32_t i = 0; i < count; ++i) {
    plan.shards.push_back({cores[i], cores[i].numa});
    ++load[cores[i].os_cpu];
  }
  if (req.endpoints.empty())
    throw std::runtime_error("a node needs at least one listen address");
  for (auto& listen : req.endpoints) {
    auto e = resolve_endpoint(topo, listen);
    if (!e.nic.empty() && !e.nic_numa_known && topo.numa_nodes().size() > 1)
      plan.notes.push_back(fmt::format("{}: the platform reports no NUMA domain for {}; "
                                       "using domain {}",
                                       e.listen, e.nic, e.poller.numa));
    // A core of the NIC's domain, least loaded first (any core if the domain has none).
    const core_info* best = nullptr;
    for (auto& c : topo.cores()) {
      if (c.numa != e.poller.numa)
        continue;
      if (best == nullptr || load[c.os_cpu] < load[best->os_cpu])
        best = &c;
    }
    if (best == nullptr)
      best = &topo.cores().front();
    e.poller.core = *best;
    if (load[best->os_cpu] > 0)
      plan.notes.push_back(fmt::format("{}: poller shares CPU {} with {} other thread(s): "
                                       "the machine has fewer cores than shards + pollers",
                                       e.listen, best->os_cpu, load[best->os_cpu]));
    ++load[best->os_cpu];
    plan.endpoints.push_back(e);
  }
  for (auto& shard : plan.shards) {
    std::vector<uint32_t> local, all;
    for (uint32_t i = 0; i < plan.endpoints.size(); ++i) {
      all.push_back(i);
      if (plan.endpoints[i].poller.numa == shard.numa)
        local.push_back(i);
    }
    plan.shard_endpoints.push_back(local.empty() ? all : local);
  }
  return plan;
}

} // namespace rw::runtime
