#pragma once
// Round trips by TCP connect: how long the handshake to HOST:PORT takes (SYN to
// SYN-ACK, one round trip on the path), for a worker picking the nearest of several
// nodes. The connection is closed at once; nothing is sent on it.

#include <chrono>
#include <optional>
#include <string>

namespace rw::services {

/// The lowest of `samples` connect times to `node` (HOST:PORT), in milliseconds, each bounded by
/// `timeout`; nothing if no connect succeeded.
std::optional<double> connect_round_trip(const std::string& node, unsigned samples,
                                         std::chrono::milliseconds timeout);

} // namespace rw::services
