#include "apps/tools/metrics_server.hpp"

#include <chrono>
#include <stdexcept>

#include <httplib.h>

#include "runtime/prometheus.hpp"

namespace rw::tools {

namespace {

std::pair<std::string, int> split_host_port(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw std::runtime_error("--metrics wants HOST:PORT (port 0: any free one), not '" + s + "'");
  auto host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1)
      port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535)
    throw std::runtime_error("--metrics wants HOST:PORT with a port of 0 to 65535, not '" + s +
                             "'");
  return {host, port};
}

} // namespace

metrics_server::metrics_server(const std::string& host_port, handlers h)
  : server_(std::make_shared<httplib::Server>()) {
  auto [host, port] = split_host_port(host_port);
  auto& svr = *server_;
  svr.new_task_queue = [] { return new httplib::ThreadPool(2); };
  svr.set_read_timeout(5, 0);
  svr.set_write_timeout(5, 0);
  svr.set_keep_alive_max_count(10);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second node
  // would share a busy port instead of being told.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  svr.Get("/metrics", [h](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(h.metrics(), runtime::prometheus::content_type);
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("metrics failed: ") + e.what() + "\n", "text/plain");
    }
  });
  svr.Get("/healthz", [h](const httplib::Request&, httplib::Response& res) {
    if (h.stopping()) {
      res.status = 503;
      res.set_content("stopping\n", "text/plain");
    } else {
      res.set_content("ok\n", "text/plain");
    }
  });
  svr.Get("/readyz", [h](const httplib::Request&, httplib::Response& res) {
    auto why = h.stopping() ? std::string("stopping") : h.not_ready();
    if (why.empty()) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(why + "\n", "text/plain");
    }
  });
  bool bound = false;
  if (port == 0) {
    port = svr.bind_to_any_port(host);
    bound = port > 0;
  } else {
    bound = svr.bind_to_port(host, port);
  }
  if (!bound)
    throw std::runtime_error("cannot open the metrics port " + host_port +
                             ": another process listens there, or the host is not an "
                             "address of this machine; give another with --metrics "
                             "HOST:PORT (port 0: any free one)");
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
             std::to_string(port);
  thread_ = std::thread([srv = server_] { srv->listen_after_bind(); });
  // Serving once this returns: a stop() before the thread's loop has begun would find
  // nothing to stop, and the loop would then run for ever.
  for (int i = 0; i < 60000 && !server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!server_->is_running()) {
    server_->stop();
    thread_.detach(); // not scheduled in a minute: it holds the server it may yet run
    throw std::runtime_error("the metrics endpoint " + address_ + " did not start serving");
  }
}

metrics_server::~metrics_server() {
  stop();
}

void metrics_server::stop() {
  if (!thread_.joinable())
    return;
  server_->stop();
  thread_.join();
}

} // namespace rw::tools
