// rw-hostile-load: what bench/hostile.sh throws at a node that must stay up, and what it
// reads meanwhile. For --seconds it keeps
//  - --strangers connections to the node's --listen that never authenticate: each
//    sends a `locate` (a whole first frame), then a hello header announcing
//    --hello-bytes and 10 bytes of it, and holds; one the node cuts is opened again;
//  - --posts POST requests of --post-mib MiB each to the node's metrics port, from 4
//    threads, each body sent as far as the server takes it;
//  - a GET /healthz every 20 ms, timed from connect to the whole answer (2 s at most);
//  - the node's resident size (/proc/PID/status), every 50 ms.
// Prints one JSON object: the node's RSS (idle, before the load; peak; last), the
// /healthz latencies (count, failures, p50, p99, max in ms) and what was sent.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "protocol/frame.hpp"

namespace pr = rw::protocol;
using clock_type = std::chrono::steady_clock;

namespace {

struct address {
  std::string host;
  uint16_t port = 0;
};

address parse(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos)
    throw std::runtime_error("want HOST:PORT, not " + s);
  return {s.substr(0, colon), static_cast<uint16_t>(std::stoi(s.substr(colon + 1)))};
}

// A blocking socket connected to `a` within 2 s, or -1.
int dial(const address& a) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(a.port);
  if (inet_pton(AF_INET, a.host.c_str(), &to.sin_addr) != 1
      || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0)
      return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::vector<std::byte> header(pr::frame_kind kind, uint32_t payload) {
  pr::frame_header h;
  h.kind = kind;
  h.payload_bytes = payload;
  std::vector<std::byte> out(pr::frame_header_bytes);
  pr::encode(h, out.data());
  return out;
}

double rss_mib(int pid) {
  std::ifstream in{fmt::format("/proc/{}/status", pid)};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// One stranger: locate, read what comes back, then a hello header and 10 bytes of it.
int stranger(const address& node, uint32_t hello_bytes) {
  int fd = dial(node);
  if (fd < 0)
    return -1;
  auto locate = header(pr::frame_kind::locate, 0);
  std::byte answer[4096];
  auto hello = header(pr::frame_kind::hello, hello_bytes);
  const char ten[10] = {};
  if (!send_all(fd, locate.data(), locate.size())
      || ::recv(fd, answer, sizeof(answer), 0) <= 0
      || !send_all(fd, hello.data(), hello.size()) || !send_all(fd, ten, sizeof(ten))) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether `fd` was closed by the node (without blocking).
bool gone(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0)
    return false;
  std::byte sink[4096];
  auto n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// A POST of `bytes` to `metrics`: the head, then the body as far as the server takes it.
bool post(const address& metrics, size_t bytes, const std::vector<char>& chunk) {
  int fd = dial(metrics);
  if (fd < 0)
    return false;
  auto head = fmt::format("POST /metrics HTTP/1.1\r\nHost: {}\r\nContent-Type: "
                          "application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                          metrics.host, bytes);
  bool ok = send_all(fd, head.data(), head.size());
  for (size_t sent = 0; ok && sent < bytes; sent += chunk.size())
    ok = send_all(fd, chunk.data(), std::min(chunk.size(), bytes - sent));
  char buf[512];
  (void)::recv(fd, buf, sizeof(buf), 0); // its answer, if any
  ::close(fd);
  return true;
}

// GET /healthz: milliseconds to the whole answer, or -1 (no answer, not 200, > 2 s).
double healthz(const address& metrics) {
  auto t0 = clock_type::now();
  int fd = dial(metrics);
  if (fd < 0)
    return -1;
  auto req = fmt::format("GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                         metrics.host);
  std::string got;
  if (send_all(fd, req.data(), req.size())) {
    char buf[1024];
    for (;;) {
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0)
        break;
      got.append(buf, size_t(n));
    }
  }
  ::close(fd);
  auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  if (got.rfind("HTTP/1.1 200", 0) != 0 && got.rfind("HTTP/1.0 200", 0) != 0)
    return -1;
  return ms > 2000 ? -1 : ms;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

} // namespace

int main(int argc, char** argv) {
  std::string node_s, metrics_s;
  int pid = 0;
  uint32_t strangers = 200, posts = 300, post_mib = 10, hello_bytes = 1u << 20;
  double seconds = 10;
  CLI::App app{
    "rw-hostile-load: strangers, large POSTs and /healthz timing against a node"};
  app.add_option("--node", node_s, "the node's --listen HOST:PORT")->required();
  app.add_option("--metrics", metrics_s, "its --metrics HOST:PORT")->required();
  app.add_option("--pid", pid, "the node's PID (RSS)")->required();
  app.add_option("--strangers", strangers, "connections that never authenticate")
    ->capture_default_str();
  app.add_option("--posts", posts, "POST requests to the metrics port")
    ->capture_default_str();
  app.add_option("--post-mib", post_mib, "each POST's body (MiB)")->capture_default_str();
  app.add_option("--hello-bytes", hello_bytes, "what each stranger's hello announces")
    ->capture_default_str();
  app.add_option("--seconds", seconds, "how long the load lasts")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  address node, metrics;
  try {
    node = parse(node_s);
    metrics = parse(metrics_s);
  } catch (const std::exception& e) {
    std::cerr << "rw-hostile-load: " << e.what() << "\n";
    return 2;
  }

  const double idle = rss_mib(pid);
  std::atomic<bool> stop{false};
  std::atomic<double> peak{idle};
  std::atomic<uint64_t> opened{0}, reopened{0}, posted{0};
  std::mutex lat_mtx;
  std::vector<double> lat;
  uint64_t failed = 0;
  const auto until = clock_type::now() + std::chrono::duration<double>(seconds);

  std::thread sampler([&] {
    while (!stop) {
      auto r = rss_mib(pid);
      if (r > peak)
        peak = r;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::thread prober([&] {
    while (!stop) {
      auto ms = healthz(metrics);
      std::lock_guard<std::mutex> g{lat_mtx};
      if (ms < 0)
        ++failed;
      else
        lat.push_back(ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::thread holder([&] {
    std::vector<int> fds;
    for (uint32_t i = 0; i < strangers && clock_type::now() < until; ++i) {
      int fd = stranger(node, hello_bytes);
      if (fd >= 0) {
        fds.push_back(fd);
        ++opened;
      }
    }
    while (clock_type::now() < until) { // keep the pressure: cut ones come back
      for (auto& fd : fds)
        if (fd < 0 || gone(fd)) {
          if (fd >= 0)
            ::close(fd);
          fd = stranger(node, hello_bytes);
          reopened += fd >= 0;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  });
  std::vector<std::thread> posters;
  std::atomic<uint32_t> next{0};
  const std::vector<char> chunk(1u << 20, 'x');
  for (int t = 0; t < 4; ++t)
    posters.emplace_back([&] {
      while (next.fetch_add(1) < posts && clock_type::now() < until)
        posted += post(metrics, size_t(post_mib) << 20, chunk) ? 1 : 0;
    });
  for (auto& t : posters)
    t.join();
  holder.join();
  stop = true;
  prober.join();
  sampler.join();
  const double last = rss_mib(pid);
  std::lock_guard<std::mutex> g{lat_mtx};
  std::cout << fmt::format(
    "{{\"idle_rss_mib\":{:.1f},\"peak_rss_mib\":{:.1f},\"last_rss_mib\":{:.1f},"
    "\"peak_ratio\":{:.3f},\"healthz\":{},\"healthz_failed\":{},"
    "\"healthz_p50_ms\":{:.2f},\"healthz_p99_ms\":{:.2f},\"healthz_max_ms\":{:.2f},"
    "\"strangers\":{},\"strangers_reopened\":{},\"posts\":{}}}",
    idle, peak.load(), last, peak.load() / idle, lat.size(), failed, percentile(lat, 0.5),
    percentile(lat, 0.99), lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end()),
    opened.load(), reopened.load(), posted.load())
            << std::endl;
  return 0;
}
