#include "runtime/control_exposure.hpp"

#include <arpa/inet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rw::runtime {

namespace {

std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    return close == std::string::npos ? address.substr(1) : address.substr(1, close - 1);
  }
  auto colon = address.find(':');
  if (colon != std::string::npos && address.find(':', colon + 1) != std::string::npos)
    return address; // a bare IPv6 address
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool runs_coordinator(const node_config& cfg) {
  return cfg.role == "coordinator" || cfg.coordinator.empty();
}

} // namespace

bool is_loopback_address(const std::string& address) {
  auto host = host_of(address);
  if (host == "localhost" || host == "lo" || host == "::1")
    return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::vector<std::string> exposed_addresses(const node_config& cfg) {
  std::vector<std::string> out;
  if (runs_coordinator(cfg)) {
    auto control = cfg.control;
    if (control.empty() && !cfg.listen.empty())
      control = host_of(cfg.listen.front()) + ":0";
    if (!control.empty() && !is_loopback_address(control))
      out.push_back(fmt::format("the control port {}", control));
  }
  for (auto& l : cfg.listen)
    if (!is_loopback_address(l))
      out.push_back(fmt::format("--listen {}", l));
  return out;
}

bool control_plane_open(const node_config& cfg) {
  bool tls = !cfg.tls_cert.empty() && !cfg.tls_key.empty() && !cfg.tls_ca.empty();
  return cfg.cluster_secret_file.empty() && !tls;
}

std::string exposure_refusal(const node_config& cfg) {
  if (!control_plane_open(cfg) || cfg.insecure)
    return {};
  auto open = exposed_addresses(cfg);
  if (open.empty())
    return {};
  return fmt::format(
    "no --cluster-secret-file, and {} {} reachable from other hosts: anyone who reaches "
    "the control port could create, stop and delete jobs, drain nodes and write "
    "checkpoints. Give every node and rw-shell --cluster-secret-file FILE (or TLS: "
    "--tls-cert, --tls-key, --tls-ca), or bind to loopback (127.0.0.1), or pass "
    "--insecure (config cluster.insecure = true) to run open anyway",
    fmt::join(open, " and "), open.size() == 1 ? "is" : "are");
}

std::string exposure_warning(const node_config& cfg) {
  if (!control_plane_open(cfg))
    return {};
  auto open = exposed_addresses(cfg);
  if (open.empty())
    return {};
  return fmt::format(
    "--insecure: no cluster secret and no TLS, and {} {} reachable from other hosts: "
    "every process that reaches {} is an operator (registers nodes, creates, stops and "
    "deletes jobs, drains nodes, takes checkpoints{})",
    fmt::join(open, " and "), open.size() == 1 ? "is" : "are",
    runs_coordinator(cfg) ? "the control port" : "the cluster's control port",
    cfg.checkpoint_root.empty() ? "" : " under --checkpoint-root " + cfg.checkpoint_root);
}

} // namespace rw::runtime
