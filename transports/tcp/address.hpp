#pragma once
// HOST:PORT parsing and the raw socket calls of the TCP transport. Errors are thrown as
// std::runtime_error with the address and the system's reason in the message.

#include <chrono>
#include <cstdint>
#include <string>

namespace rw::transports::tcp {

struct address {
  std::string host;
  uint16_t port = 0;

  std::string to_string() const;
};

/// Whether `host` means "any address" (empty, *, 0.0.0.0): bound on every interface,
/// and reached the way the peer came.
bool is_wildcard(const std::string& host);

/// Parses "HOST:PORT" (PORT 0 allowed for listening on any free port).
address parse_address(const std::string& text);

/// A listening, non-blocking socket. Throws if the address is bad or in use.
int listen_on(const address& addr, int backlog = 128);

/// The port a socket is bound to.
uint16_t bound_port(int fd);

/// A connected, non-blocking socket with TCP_NODELAY. Throws on failure or timeout.
int connect_to(const address& addr, std::chrono::milliseconds timeout);

/// Non-blocking, TCP_NODELAY and large buffers for an accepted or connected socket.
void tune_socket(int fd);

/// Acknowledges now what the socket has received (TCP_QUICKACK), and leaves Linux's
/// "interactive" mode, in which an ACK waits up to 40 ms for data to ride on. A
/// connection that carries data both ways (a rack uplink's partial sums out, the home's
/// sums back) enters that mode; a sender limited by its congestion window (BBR keeps it
/// near twice the path's bandwidth-delay product) then waits for those ACKs and the
/// link idles: 10-40 ms stalls on a hierarchical job's core links, 1.42 x its bound
/// under BBR against 1.08 x with ACKs sent at once (bench/RESULTS.md, netns-racks).
/// Linux re-enters the mode on its own, so a reader calls this after every round of
/// reads that took data. A no-op where TCP_QUICKACK does not exist.
void ack_now(int fd) noexcept;

} // namespace rw::transports::tcp
