// rw-transport-ceiling: how fast one connection moves frames of one chunk each, with
// nothing else in the way (no job, no shards, no sums), over libfabric's provider
// (RackWeave's fabric transport: RMA writes into the receiver's slots, credits back)
// and over a plain loopback TCP socket (writev of header + payload, reads into one
// buffer), in the same process and run. A sender thread and a receiver thread per
// path; reported: Gbit/s of payload and the process's CPU seconds per GiB moved.
// What it answers: whether a gap between rackweave-fabric and rackweave-tcp is the
// provider's own per-byte cost (bench/fabric-ceiling.sh).
//
//   rw-transport-ceiling [--bytes 2GiB] [--chunk-bytes 256KiB] [--window 16]
//                        [--provider tcp] [--json]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/tools/units.hpp"
#include "transports/fabric/endpoint.hpp"

namespace {

using namespace rw::protocol;
using namespace rw::transports;
using clock_type = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec)
         + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct result {
  std::string path;
  double gbps = 0;
  double cpu_s_per_gib = 0;
  uint64_t frames = 0;
};

// Counts frames as they arrive; a resident frame's slot goes back when its reference
// is dropped here (the credit), as a shard does once it has summed it.
struct counting_sink final : frame_sink {
  std::atomic<uint64_t> frames{0};
  std::vector<std::byte> scratch;
  payload_target on_header(const connection_ptr&, const frame_header& h) override {
    scratch.resize(h.payload_bytes);
    return payload_target::into(scratch.data());
  }
  void on_frame(const connection_ptr&, const frame_header&, payload_target&) override {
    frames.fetch_add(1, std::memory_order_release);
  }
  void on_closed(const connection_ptr&, rw::errc, const std::string&) override {}
  void on_resident_frame(const connection_ptr&, const frame_header&,
                         rw::runtime::buffer_ref) override {
    frames.fetch_add(1, std::memory_order_release);
  }
};

frame_header chunk_header(uint32_t i, uint32_t bytes) {
  frame_header h;
  h.kind = frame_kind::push;
  h.chunk_index = i;
  h.payload_bytes = bytes;
  return h;
}

result run_fabric(const std::string& provider, uint64_t total, uint32_t chunk,
                  int window) {
  fabric::endpoint_settings s;
  s.slots = static_cast<uint32_t>(window) * 2;
  s.pool_bytes = uint64_t{s.slots} * fabric::slot_bytes_for(chunk) + (1u << 20);
  s.io_timeout_ms = 10000;
  auto a = std::make_shared<fabric::endpoint>(fabric::domain::open(provider, "127.0.0.1"),
                                              s);
  auto b = std::make_shared<fabric::endpoint>(fabric::domain::open(provider, "127.0.0.1"),
                                              s);
  auto ab = a->open("b", chunk);
  auto ba = b->open("a", chunk);
  ab->bind(ba->offer());
  ba->bind(ab->offer());
  a->adopt(ab);
  b->adopt(ba);
  counting_sink ra, rb;
  std::atomic<bool> stop{false};
  // Each side's endpoint is polled by its own thread, as a node's poller and a worker's
  // receiver do: the provider makes progress (credits included) only when polled.
  std::thread pump_a{[&] {
    while (!stop)
      a->poll(1, ra);
  }};
  std::thread pump_b{[&] {
    while (!stop)
      b->poll(1, rb);
  }};
  std::vector<std::byte> data(uint64_t{chunk} * static_cast<uint64_t>(window));
  std::memset(data.data(), 1, data.size());
  const uint64_t frames = total / chunk;
  std::vector<frame_header> headers(static_cast<size_t>(window));
  std::vector<iovec> pieces(static_cast<size_t>(window));
  // Warm-up: the connection set up, the memory registered.
  for (int i = 0; i < window; ++i) {
    headers[size_t(i)] = chunk_header(uint32_t(i), chunk);
    pieces[size_t(i)] = {data.data() + uint64_t(i) * chunk, chunk};
  }
  if (!ab->send_batch(headers.data(), pieces.data(), window))
    throw std::runtime_error("fabric: the warm-up send failed: " + ab->close_reason());
  while (rb.frames.load() < uint64_t(window))
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  auto cpu0 = cpu_seconds();
  auto t0 = clock_type::now();
  uint64_t base = rb.frames.load();
  for (uint64_t sent = 0; sent < frames;) {
    int n = static_cast<int>(std::min<uint64_t>(uint64_t(window), frames - sent));
    if (!ab->send_batch(headers.data(), pieces.data(), n))
      throw std::runtime_error("fabric: a send failed: " + ab->close_reason());
    sent += uint64_t(n);
  }
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  while (rb.frames.load(std::memory_order_acquire) < base + frames) {
    if (clock_type::now() > deadline)
      throw std::runtime_error("fabric: frames did not all arrive within 60 s");
    std::this_thread::yield();
  }
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto cpu = cpu_seconds() - cpu0;
  stop = true;
  pump_a.join();
  pump_b.join();
  double bytes = double(frames) * chunk;
  return {"fabric (" + a->fabric_domain().provider_name() + ")", bytes * 8 / secs / 1e9,
          cpu / (bytes / (1u << 30)), frames};
}

result run_tcp(uint64_t total, uint32_t chunk) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0
      || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || ::listen(listener, 1) != 0
      || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error(
      fmt::format("tcp: cannot listen on loopback: {}", strerror(errno)));
  int out = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error(fmt::format("tcp: cannot connect: {}", strerror(errno)));
  int in = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const uint64_t frames = total / chunk;
  const uint64_t bytes = frames * (frame_header_bytes + chunk);
  std::thread reader{[&] {
    std::vector<std::byte> buf(chunk + frame_header_bytes);
    uint64_t got = 0;
    while (got < bytes) {
      auto n = ::read(in, buf.data(), std::min<uint64_t>(buf.size(), bytes - got));
      if (n <= 0)
        return;
      got += uint64_t(n);
    }
  }};
  std::vector<std::byte> data(chunk, std::byte{1});
  std::byte head[frame_header_bytes] = {};
  auto cpu0 = cpu_seconds();
  auto t0 = clock_type::now();
  for (uint64_t f = 0; f < frames; ++f) {
    iovec iov[2] = {{head, frame_header_bytes}, {data.data(), chunk}};
    size_t left = frame_header_bytes + chunk;
    while (left > 0) {
      auto n = ::writev(out, iov, 2);
      if (n <= 0)
        throw std::runtime_error(fmt::format("tcp: write failed: {}", strerror(errno)));
      left -= size_t(n);
      // Partial write: move the pieces on.
      size_t k = size_t(n);
      for (auto& v : iov) {
        auto d = std::min(k, v.iov_len);
        v.iov_base = static_cast<std::byte*>(v.iov_base) + d;
        v.iov_len -= d;
        k -= d;
      }
    }
  }
  reader.join();
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto cpu = cpu_seconds() - cpu0;
  ::close(out);
  ::close(in);
  double payload = double(frames) * chunk;
  return {"tcp (loopback socket)", payload * 8 / secs / 1e9, cpu / (payload / (1u << 30)),
          frames};
}

} // namespace

int main(int argc, char** argv) {
  std::string bytes_text = "2GiB", chunk_text = "256KiB", provider = "tcp";
  int window = 16;
  bool json = false;
  CLI::App app{
    "rw-transport-ceiling: one connection's frame rate over libfabric and over a "
    "loopback TCP socket, nothing else in the way"};
  app.add_option("--bytes", bytes_text, "payload moved per path")->capture_default_str();
  app.add_option("--chunk-bytes", chunk_text, "payload per frame")->capture_default_str();
  app
    .add_option("--window", window,
                "frames posted at once (fabric; slots are twice this)")
    ->check(CLI::Range(1, 1024))
    ->capture_default_str();
  app.add_option("--provider", provider, "libfabric provider")->capture_default_str();
  app.add_flag("--json", json, "one JSON line per path");
  CLI11_PARSE(app, argc, argv);
  try {
    auto total = rw::tools::parse_bytes(bytes_text);
    auto chunk = static_cast<uint32_t>(rw::tools::parse_bytes(chunk_text));
    for (auto& r : {run_tcp(total, chunk), run_fabric(provider, total, chunk, window)}) {
      if (json)
        std::cout << nlohmann::json{{"path", r.path},
                                    {"chunk_bytes", chunk},
                                    {"frames", r.frames},
                                    {"gbps", r.gbps},
                                    {"cpu_s_per_gib", r.cpu_s_per_gib}}
                       .dump()
                  << std::endl;
      else
        std::cout << fmt::format(
          "{:28} {:8.2f} Gbit/s  {:6.3f} CPU s per GiB  ({} frames of {} "
          "bytes)\n",
          r.path, r.gbps, r.cpu_s_per_gib, r.frames, chunk);
    }
  } catch (const std::exception& e) {
    std::cerr << "rw-transport-ceiling: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
