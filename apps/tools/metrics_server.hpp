#pragma once
// rw-node's HTTP endpoint for operators (--metrics HOST:PORT):
//   GET /metrics  the Prometheus text format (the node's latest snapshot:
//                 apps/tools/metrics_snapshot.hpp); with a token, only for
//                 "Authorization: Bearer TOKEN" (else 401)
//   GET /healthz  200 "ok" while the process serves (503 "stopping" once it stops)
//   GET /readyz   200 "ready" once the node serves (registered, pollers up), else 503
//                 and why not ("starting", "stopping", or what is missing)
// HEAD too; anything else is 404.
//
// A small HTTP/1.1 server of its own, built to be cheap to keep up whoever connects:
// one thread, non-blocking sockets on epoll, each connection with a fixed buffer for
// its request head (apps/tools/http_head.hpp) and one deadline from accept to its
// answer written, whatever its pace. Every answer closes the connection. Refused,
// without reading further: any method but GET and HEAD (405), a request with a body
// (413), a head past its bound (431), a malformed one (400); cut: a connection past
// its deadline (408 if it can still be told). Past `max_connections`, a few more
// (`health_reserve`, with `reserve_deadline`) are let in for /healthz and /readyz
// only (anything else: 503), and so is a connection from an address that holds
// `max_per_address` already. Past those a new connection takes the place of the
// oldest one that has sent nothing for `evict_idle_after` (cut, told 408), so idle
// connections from anywhere never keep a health probe out; with none such it is closed
// at once (503). The handlers
// run on the serving thread, so they must be quick: rw-node gives it a snapshot.
//
// Why not cpp-httplib, which served it before: its 0.11.4 (Debian's, compiled) reads
// any POST body whole, grows a header line without bound, times out each recv() but
// not a request (a client trickling a byte every 2 s held a worker for ever), and
// serves /healthz on the same two-thread pool as slow clients and scrapes. Its limits
// are compiled in; an endpoint that serves three fixed GETs needs none of the rest.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "apps/tools/http_head.hpp"

namespace rw::tools {

struct metrics_limits {
  size_t max_head_bytes = http::max_head_bytes;     // request line and header fields
  std::chrono::milliseconds deadline{5000};         // accept to answer written
  size_t max_connections = 64;                      // open at once
  size_t health_reserve = 8;                        // past that: /healthz, /readyz only
  std::chrono::milliseconds reserve_deadline{1000}; // ... each with this deadline
  size_t max_per_address = 16; // from one address, request not read yet; past: reserve
  /// Full (regular and reserve): a new connection takes the place of the oldest one
  /// that has sent nothing for this long, so idle connections never shut out a probe.
  std::chrono::milliseconds evict_idle_after{100};
};

struct metrics_options {
  std::string token; // "": /metrics is open; else it asks for "Bearer <token>"
  metrics_limits limits;
};

class metrics_server {
public:
  /// What /metrics serves: `text` (shared, not copied per scrape) then `trailer`.
  struct exposition {
    std::shared_ptr<const std::string> text;
    std::string trailer;
  };

  struct handlers {
    std::function<exposition()> metrics;    // the exposition (throws: 500)
    std::function<std::string()> not_ready; // "" when ready, else why not
    std::function<bool()> stopping;         // the node is stopping
  };

  /// Binds HOST:PORT (port 0: any free port) and serves on a thread of its own. Throws
  /// std::runtime_error saying what is wrong (not HOST:PORT, the port is busy).
  metrics_server(const std::string& host_port, handlers h, metrics_options o = {});
  ~metrics_server();

  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  /// The bound HOST:PORT.
  const std::string& address() const noexcept { return address_; }

  /// Stops serving: open connections are closed. Idempotent.
  void stop();

private:
  class loop;
  std::unique_ptr<loop> loop_;
  std::thread thread_;
  std::string address_;
};

} // namespace rw::tools
