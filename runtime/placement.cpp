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
      throw std::runtime_error(
        fmt::format("NUMA domain {} does not exist on this machine (it has [{}])", n,
                    fmt::join(have, ", ")));
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
    throw std::runtime_error(
      "the configured cores and NUMA domains leave no core to use");
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
      throw std::runtime_error(
        fmt::format("no network device here has address {} (devices: {})", host,
                    fmt::join(have, ", ")));
    }
    e.nic = nic->name;
    e.nic_numa_known = nic->numa_known;
    e.poller.numa = nic->numa;
    return e;
  }
  throw std::runtime_error(fmt::format(
    "'{}' is neither a network device of this machine nor an IPv4 address", host));
}

poller_choice choose_pollers(uint32_t cores, uint32_t listens, uint32_t asked) {
  poller_choice c;
  listens = std::max(listens, 1u);
  if (asked > 0) {
    c.per_listen = asked;
    c.why = fmt::format("{} per --listen address (--pollers {})", asked, asked);
  } else if (cores < spare_core_threshold) {
    c.per_listen = 1;
    c.why = fmt::format(
      "auto: 1 per --listen address (a machine of {} core(s), under {}: "
      "pollers share cores with shards)",
      cores, spare_core_threshold);
  } else {
    auto total = std::clamp(cores / 4, 2u, 8u);
    c.per_listen = std::max(1u, total / listens);
    c.why = fmt::format(
      "auto: {} per --listen address ({} cores: one poller per 4 cores, "
      "2 to 8 in all, over {} address(es); cores kept for them from shards)",
      c.per_listen, cores, listens);
  }
  return c;
}

fabric_choice choose_fabric_endpoints(const std::string& provider, uint32_t cores,
                                      uint32_t nics, uint32_t asked) {
  fabric_choice c;
  nics = std::max(nics, 1u);
  if (asked > 0) {
    c.per_nic = asked;
    c.why = fmt::format("{} per NIC (--fabric-endpoints {})", asked, asked);
  } else if (provider != "tcp") {
    c.per_nic = 1;
    c.why = fmt::format("auto: 1 per NIC (provider {}: the NIC moves the bytes)",
                        provider);
  } else {
    auto pollers = choose_pollers(cores, 1, 0).per_listen;
    c.per_nic = std::max(1u, pollers / nics);
    c.why = fmt::format(
      "auto: {} per NIC (provider tcp: the CPU moves every byte, and an "
      "endpoint's progress runs one thread at a time; as many as the "
      "pollers of {} core(s), over {} NIC(s))",
      c.per_nic, cores, nics);
  }
  return c;
}

thread_place fabric_poller_place(const topology& topo, const placement& plan, int numa,
                                 uint32_t k) {
  auto first = plan.endpoints.empty() ? thread_place{} : plan.endpoints.front().poller;
  auto domain = numa >= 0 ? static_cast<uint32_t>(numa) : first.numa;
  std::vector<core_info> pick;
  for (auto& e : plan.endpoints)
    if (e.poller.core.numa == domain
        && std::none_of(pick.begin(), pick.end(),
                        [&](auto& c) { return c.os_cpu == e.poller.core.os_cpu; }))
      pick.push_back(e.poller.core);
  if (pick.empty())
    for (auto& c : topo.cores())
      if (c.numa == domain)
        pick.push_back(c);
  if (pick.empty())
    return first;
  return {pick[k % pick.size()], domain};
}

placement plan_placement(const topology& topo, const placement_request& req) {
  placement plan;
  auto cores = allowed_cores(topo, req);
  if (req.endpoints.empty())
    throw std::runtime_error("a node needs at least one listen address");
  auto machine_cores = static_cast<uint32_t>(topo.cores().size());
  auto choice = choose_pollers(machine_cores, static_cast<uint32_t>(req.endpoints.size()),
                               req.pollers);
  plan.pollers_why = choice.why;
  // Each listen address, as `per_listen` endpoints on consecutive ports.
  for (uint32_t l = 0; l < req.endpoints.size(); ++l) {
    auto first = resolve_endpoint(topo, req.endpoints[l]);
    if (!first.nic.empty() && !first.nic_numa_known && topo.numa_nodes().size() > 1)
      plan.notes.push_back(fmt::format("{}: the platform reports no NUMA domain for {}; "
                                       "using domain {}",
                                       first.listen, first.nic, first.poller.numa));
    auto colon = first.listen.rfind(':');
    auto host = first.listen.substr(0, colon);
    unsigned long port = 0;
    try {
      size_t used = 0;
      port = std::stoul(first.listen.substr(colon + 1), &used);
      if (used != first.listen.size() - colon - 1 || port > 65535)
        throw std::invalid_argument("port");
    } catch (const std::exception&) {
      throw std::runtime_error(
        fmt::format("'{}': the port is not a number from 0 to 65535", req.endpoints[l]));
    }
    if (port != 0 && port + choice.per_listen - 1 > 65535)
      throw std::runtime_error(fmt::format(
        "'{}' with {} pollers needs ports {} to {}: past 65535", req.endpoints[l],
        choice.per_listen, port, port + choice.per_listen - 1));
    for (uint32_t k = 0; k < choice.per_listen; ++k) {
      auto e = first;
      e.listen = fmt::format("{}:{}", host, port == 0 ? 0 : port + k);
      e.listen_index = l;
      e.poller_index = k;
      plan.endpoints.push_back(std::move(e));
    }
  }
  // On a machine with cores to spare, auto shards leave the pollers theirs: the last
  // cores of each poller's domain (of the machine, when the domain has no core).
  if (req.shards == 0 && machine_cores >= spare_core_threshold) {
    std::vector<uint32_t> kept;
    for (auto& e : plan.endpoints) {
      const core_info* pick = nullptr;
      for (auto& c : topo.cores()) {
        if (std::find(kept.begin(), kept.end(), c.os_cpu) != kept.end())
          continue;
        if (c.numa == e.poller.numa)
          pick = &c; // the last free one of the domain
      }
      if (pick == nullptr)
        for (auto& c : topo.cores())
          if (std::find(kept.begin(), kept.end(), c.os_cpu) == kept.end())
            pick = &c;
      if (pick != nullptr)
        kept.push_back(pick->os_cpu);
    }
    std::vector<core_info> left;
    for (auto& c : cores)
      if (std::find(kept.begin(), kept.end(), c.os_cpu) == kept.end())
        left.push_back(c);
    if (!left.empty())
      cores = std::move(left);
  }
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
  for (auto& e : plan.endpoints) {
    // A core of the NIC's domain, least loaded first (any core if the domain has none).
    const core_info* best = nullptr;
    for (auto& c : topo.cores()) {
      if (c.numa != e.poller.numa)
        continue;
      if (best == nullptr || load[c.os_cpu] < load[best->os_cpu])
        best = &c;
    }
    if (best == nullptr) // no core in the NIC's domain: the least loaded of any
      for (auto& c : topo.cores())
        if (best == nullptr || load[c.os_cpu] < load[best->os_cpu])
          best = &c;
    e.poller.core = *best;
    if (load[best->os_cpu] > 0)
      plan.notes.push_back(
        fmt::format("{}: poller shares CPU {} with {} other thread(s): "
                    "the machine has fewer cores than shards + pollers",
                    e.listen, best->os_cpu, load[best->os_cpu]));
    ++load[best->os_cpu];
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
