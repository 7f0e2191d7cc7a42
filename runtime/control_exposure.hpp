#pragma once
// Whether a node may start with the control plane it would have: without a cluster
// secret (and without TLS) every process that reaches the coordinator's control port
// is an operator - it creates, stops and deletes jobs, drains nodes and takes
// checkpoints. That is acceptable on loopback addresses only, or when the operator
// says so with --insecure.

#include <string>
#include <vector>

#include "runtime/node_config.hpp"

namespace rw::runtime {

/// Whether HOST (of HOST:PORT, [V6]:PORT, or a bare host) is a loopback address:
/// 127.0.0.0/8, ::1, localhost, or the loopback device lo.
bool is_loopback_address(const std::string& address);

/// The addresses of `cfg` that are reachable beyond this host: its control port (if it
/// runs the coordinator: --control, else the first --listen host) and its --listen
/// addresses, as given.
std::vector<std::string> exposed_addresses(const node_config& cfg);

/// Whether the control plane has no protection of its own: no cluster secret, no TLS.
bool control_plane_open(const node_config& cfg);

/// "" when `cfg` may start; else the refusal, saying what to do (a secret, TLS,
/// loopback addresses, or --insecure).
std::string exposure_refusal(const node_config& cfg);

/// With --insecure: the warning naming what is open ("" when nothing is).
std::string exposure_warning(const node_config& cfg);

} // namespace rw::runtime
