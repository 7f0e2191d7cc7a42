#pragma once
// Which rack a worker of a hierarchical job placed at join belongs to, from what the
// node that got its hello knows: the worker's host, its rack option, the node it named
// and why it named it. Plain data in, a node index and the reason out; no actor, so the
// rules are tested on their own (tests/unit/test_rack_choice.cpp).
//
// The rules, first that applies:
//   0. a rack option naming no rack of the job is an error (naming the job's racks);
//   1. same host: the job's nodes whose address has the worker's IP as its host.
//      One: that node (even against the worker's rack option: the host is a fact).
//      Several (on one machine every node shares the host): among them, the worker's
//      rack option if it names one of them, else the node it named if it is one of
//      them, else undecided among them (rule 4 over those nodes only);
//   2. the worker's rack option;
//   3. the rack of the node it named (if that node is one of the job's);
//   4. undecided: the worker is told the candidate nodes and says hello at the one with
//      the lowest round trip it measures; there rule 1 or 3 holds, for that node.

#include <cstdint>
#include <string>
#include <vector>

#include "actors/cluster_messages.hpp"
#include "protocol/control.hpp"

namespace rw::actors::detail {

constexpr uint32_t no_node = UINT32_MAX;

struct placement_facts {
  std::string peer_host;    // the worker's IP, as the node sees the connection
  std::string rack;         // the worker's rack option ("": none)
  std::string picked_by;    // why the worker named this node ("": it was told to)
  uint32_t named = no_node; // the node of the job it said hello to (no_node: another)
};

struct rack_choice {
  uint32_t node = no_node; // the rack's node, an index into the layout; no_node: rule 4
  std::vector<uint32_t> candidates; // rule 4: the nodes to measure the round trip to
  std::string reason;               // for the logs: which rule, with the names it used
  std::string error; // non-empty: refuse the hello with this (errc::invalid_spec)
};

rack_choice choose_rack(const job_layout& layout, const std::string& job,
                        const placement_facts& facts);

/// A node's answer to a hello for job `job` that it does not hold (it is not among the
/// job's nodes, or runs the coordinator alone): errc::moved to the node the rules choose
/// (one candidate), or to every node of the job when they cannot tell (the worker
/// measures the round trips); or errc::invalid_spec for a bad rack option. `here` names
/// the answering node; `reason` is set to why, for its log.
protocol::error_msg send_elsewhere(const job_layout& layout, const std::string& job,
                                   uint32_t rank, const placement_facts& facts,
                                   const std::string& here, std::string& reason);

/// The addresses of the layout's nodes `nodes`.
std::vector<std::string> addresses_of(const job_layout& layout,
                                      const std::vector<uint32_t>& nodes);

/// The host part of "HOST:PORT" ("" if it does not parse).
std::string host_of(const std::string& address);

} // namespace rw::actors::detail
