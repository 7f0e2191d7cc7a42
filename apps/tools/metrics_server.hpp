#pragma once
// rw-node's HTTP endpoint for operators (--metrics HOST:PORT), on cpp-httplib:
//   GET /metrics  the Prometheus text format (actors/node_metrics.hpp)
//   GET /healthz  200 "ok" while the process serves (503 "stopping" once it stops)
//   GET /readyz   200 "ready" once the node serves (registered, pollers up), else 503
//                 and why not ("starting", "stopping", or what is missing)
// Anything else is 404. Two threads serve requests; each request's reads and writes
// time out after 5 s.

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace rw::tools {

class metrics_server {
public:
  struct handlers {
    std::function<std::string()> metrics;   // the exposition text
    std::function<std::string()> not_ready; // "" when ready, else why not
    std::function<bool()> stopping;         // the node is stopping
  };

  /// Binds HOST:PORT (port 0: any free port) and serves on a thread of its own. Throws
  /// std::runtime_error saying what is wrong (not HOST:PORT, the port is busy).
  metrics_server(const std::string& host_port, handlers h);
  ~metrics_server();

  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  /// The bound HOST:PORT.
  const std::string& address() const noexcept {
    return address_;
  }

  /// Stops serving and waits for requests in progress. Idempotent.
  void stop();

private:
  std::shared_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

} // namespace rw::tools
