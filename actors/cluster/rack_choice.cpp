#include "actors/cluster/rack_choice.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "transports/tcp/address.hpp"

namespace rw::actors::detail {

std::string host_of(const std::string& address) {
  try {
    return transports::tcp::parse_address(address).host;
  } catch (const std::exception&) {
    return {};
  }
}

namespace {

uint32_t rack_index(const job_layout& l, const std::string& rack) {
  auto it = std::find(l.racks.begin(), l.racks.end(), rack);
  return it == l.racks.end() ? no_node : static_cast<uint32_t>(it - l.racks.begin());
}

// The rule of the named node, with the worker's own reason for naming it.
std::string named_reason(const job_layout& l, const placement_facts& f) {
  auto why = fmt::format("rack of the node it named ({})", l.nodes[f.named]);
  if (!f.picked_by.empty())
    why += fmt::format(", which the worker picked by {}", f.picked_by);
  return why;
}

rack_choice same_host(const job_layout& l, const placement_facts& f,
                      const std::vector<uint32_t>& here) {
  std::vector<std::string> names;
  for (auto k : here)
    names.push_back(l.nodes[k]);
  if (here.size() == 1) {
    auto why = fmt::format("same host as {} ({})", l.nodes[here[0]], f.peer_host);
    if (!f.rack.empty() && f.rack != l.racks[here[0]])
      why += fmt::format("; the worker's rack option '{}' gives way to its host", f.rack);
    return {here[0], {}, why, {}};
  }
  auto shared = fmt::format("same host ({}) as {}", f.peer_host, fmt::join(names, ", "));
  auto opt = rack_index(l, f.rack);
  if (opt != no_node && std::find(here.begin(), here.end(), opt) != here.end())
    return {opt,
            {},
            fmt::format("{}; among them the worker's rack option '{}'", shared, f.rack),
            {}};
  if (f.named != no_node && std::find(here.begin(), here.end(), f.named) != here.end())
    return {
      f.named, {}, fmt::format("{}; among them the {}", shared, named_reason(l, f)), {}};
  return {no_node,
          here,
          fmt::format("{}, and neither its rack option nor the node it named picks one",
                      shared),
          {}};
}

} // namespace

rack_choice choose_rack(const job_layout& l, const std::string& job,
                        const placement_facts& f) {
  rack_choice out;
  if (!f.rack.empty() && rack_index(l, f.rack) == no_node) {
    out.error = fmt::format(
      "the worker's rack '{}' is not a rack of job '{}' (its racks: {})", f.rack, job,
      fmt::join(l.racks, ", "));
    return out;
  }
  std::vector<uint32_t> here;
  for (uint32_t k = 0; k < l.addresses.size(); ++k) {
    auto host = host_of(l.addresses[k]);
    if (!f.peer_host.empty() && host == f.peer_host
        && !transports::tcp::is_wildcard(host))
      here.push_back(k);
  }
  if (!here.empty())
    return same_host(l, f, here);
  if (!f.rack.empty()) {
    auto k = rack_index(l, f.rack);
    return {k, {}, fmt::format("the worker's rack option '{}'", f.rack), {}};
  }
  if (f.named != no_node && f.named < l.nodes.size())
    return {f.named, {}, named_reason(l, f), {}};
  for (uint32_t k = 0; k < l.nodes.size(); ++k)
    out.candidates.push_back(k);
  out.reason = fmt::format(
    "no node of job '{}' shares the worker's host ({}), it gave no "
    "rack option, and the node it named is not one of the job's",
    job, f.peer_host);
  return out;
}

std::vector<std::string> addresses_of(const job_layout& l,
                                      const std::vector<uint32_t>& nodes) {
  std::vector<std::string> out;
  for (auto k : nodes)
    out.push_back(l.addresses.at(k));
  return out;
}

protocol::error_msg send_elsewhere(const job_layout& l, const std::string& job,
                                   uint32_t rank, const placement_facts& f,
                                   const std::string& here, std::string& reason) {
  protocol::error_msg out;
  auto choice = choose_rack(l, job, f);
  if (!choice.error.empty()) {
    reason = choice.error;
    out.code = errc::invalid_spec;
    out.message = choice.error;
    return out;
  }
  out.code = errc::moved;
  if (l.reduction == "hierarchical" && rank < l.rank_racks.size()) {
    auto k = l.rank_racks[rank];
    if (!f.rack.empty() && f.rack != l.racks.at(k)) {
      reason = fmt::format(
        "rank {} of job '{}' belongs to rack {}, but the worker says its "
        "rack is '{}'",
        rank, job, l.racks[k], f.rack);
      out.code = errc::invalid_spec;
      out.message = reason;
      return out;
    }
    choice.node = k;
    choice.reason = fmt::format("rank {}'s rack is {}", rank, l.racks[k]);
  }
  if (choice.node != no_node) {
    reason = choice.reason;
    out.candidates = {l.addresses[choice.node]};
    out.message = fmt::format(
      "{} is where rank {} of job '{}' says hello ({}, node {}): {}; "
      "node {} does not hold the job",
      l.addresses[choice.node], rank, job, l.racks[choice.node], l.nodes[choice.node],
      choice.reason, here);
    return out;
  }
  reason = choice.reason + "; the worker picks the nearest by round trip";
  out.candidates = addresses_of(l, choice.candidates);
  out.message = fmt::format(
    "{} or another node of job '{}' ({}): say hello at the nearest; "
    "node {} does not hold the job ({})",
    out.candidates.front(), job, fmt::join(out.candidates, ", "), here, choice.reason);
  return out;
}

} // namespace rw::actors::detail
