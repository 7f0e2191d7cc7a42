#pragma once
// Where a node's threads go: which core each chunk shard and each NIC poller is pinned
// to, and which NUMA domain their memory comes from. A pure function of the topology
// and the config, so the policy is testable on any machine.
//
// Policy: each --listen address becomes `pollers` endpoints on the same host (ports
// PORT, PORT+1, ...; port 0 gives each a free one), one NIC poller each, so that no one
// thread reads every byte of a NIC: a worker connects to every endpoint and its chunks
// are spread over them (routing_table::endpoint_of). `pollers` 0 is auto: one per four
// cores of the machine, 2 to 8 in all, shared out among the --listen addresses; one on
// a machine of fewer than 8 cores. Shards take the allowed cores in order (one per core;
// `shards` 0 means one per allowed core, but on a machine of 8 cores or more the
// pollers' cores are kept from them: the last cores of each poller's NUMA domain). Each
// endpoint's poller goes to a core of its NIC's NUMA domain, preferring one no shard or
// other poller uses; on a machine with fewer cores than threads it shares the
// least-loaded core of that domain, and the plan says so.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/topology.hpp"

namespace rw::runtime {

struct placement_request {
  uint32_t shards = 0;                // 0 = one per allowed core
  std::vector<uint32_t> cores;        // OS CPU numbers shards may use; empty = all
  std::vector<uint32_t> numa;         // NUMA domains shards may use; empty = all
  std::vector<std::string> endpoints; // listen HOST:PORT, `pollers` endpoints each
  uint32_t pollers = 0;               // per listen address; 0 = auto
};

/// The auto rule for pollers per --listen address on a machine of `cores` cores with
/// `listens` addresses, and why (for the node's start line).
struct poller_choice {
  uint32_t per_listen = 1;
  std::string why;
};
poller_choice choose_pollers(uint32_t cores, uint32_t listens, uint32_t asked);

/// Fabric endpoints per NIC, and why (for the node's start line). Each has its own
/// domain, receive pool and poller: an endpoint's transmit progress runs one thread at
/// a time (transports/fabric/core.hpp, and the provider's own endpoint lock), so on the
/// tcp provider, where the CPU moves every byte, one endpoint would carry all the NIC's
/// traffic on one thread at a time (its own domain keeps a provider that serializes a
/// domain from sharing it). auto: for tcp as many as choose_pollers gives the machine
/// in all (shared among the NICs); for verbs and efa, whose NIC moves the bytes, one.
struct fabric_choice {
  uint32_t per_nic = 1;
  std::string why;
};
fabric_choice choose_fabric_endpoints(const std::string& provider, uint32_t cores,
                                      uint32_t nics, uint32_t asked);

/// The machine's cores from which auto placement keeps shards off, for the pollers.
constexpr uint32_t spare_core_threshold = 8;

struct thread_place {
  core_info core;
  uint32_t numa = 0;
};

struct endpoint_place {
  std::string listen; // HOST:PORT to bind (an interface name resolved to its address)
  uint32_t listen_index = 0; // which --listen address it serves
  uint32_t poller_index = 0; // which of that address's pollers (port + poller_index)
  std::string nic;           // the device holding the address ("" for wildcard)
  bool nic_numa_known = false;
  thread_place poller;
};

struct placement {
  std::vector<thread_place> shards;
  std::vector<endpoint_place> endpoints;
  /// For each shard, the endpoints that carry its chunks: those in its NUMA domain, or
  /// all of them if its domain has none.
  std::vector<std::vector<uint32_t>> shard_endpoints;
  std::vector<std::string> notes; // for the log: sharing, unknown locality
  std::string pollers_why;        // how many pollers per address, and why
};

/// Where fabric endpoint `k` of a NIC in NUMA domain `numa` (-1: unknown, the first
/// endpoint's domain) polls: the TCP pollers' cores of that domain in turn (on a machine
/// of 8 cores or more, cores kept from the shards; a fabric worker's TCP connection
/// carries little), else the domain's cores in turn.
thread_place fabric_poller_place(const topology& topo, const placement& plan, int numa,
                                 uint32_t k);

/// Plans the node. Throws std::runtime_error naming what does not exist (a core, a
/// NUMA domain, a NIC or address) or cannot fit (more shards than cores).
placement plan_placement(const topology& topo, const placement_request& req);

/// Resolves one --listen address: "eth0:7700" to the device's IPv4 address and its NUMA
/// domain; an IP must be on this machine; a wildcard host stays one. Throws with a
/// message naming what is wrong.
endpoint_place resolve_endpoint(const topology& topo, const std::string& listen);

} // namespace rw::runtime
