#pragma once
// A connection for tests of what a shard sends: it records each write (the chunks of
// its frames and where their payloads were), in the order written, from any thread.

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transports/transport.hpp"

namespace rw::testing {

class recording final : public transports::connection {
public:
  struct write {
    std::vector<uint32_t> chunks;
    std::vector<void*> payloads;
  };

  bool send(const protocol::frame_header& h, const iovec* payload, int count) override {
    std::lock_guard<std::mutex> guard{mtx_};
    writes.push_back({{h.chunk_index}, {count > 0 ? payload[0].iov_base : nullptr}});
    return true;
  }
  bool send_batch(const protocol::frame_header* headers, const iovec* payloads,
                  int n) override {
    write w;
    for (int i = 0; i < n; ++i) {
      w.chunks.push_back(headers[i].chunk_index);
      w.payloads.push_back(payloads[i].iov_base);
    }
    std::lock_guard<std::mutex> guard{mtx_};
    writes.push_back(w);
    return true;
  }
  void close() override {}
  bool is_open() const noexcept override { return true; }
  const std::string& peer() const noexcept override { return name_; }

  /// Every frame's chunk in the order written, once there are `n` (or after 10 s).
  std::vector<uint32_t> chunks(size_t n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      std::vector<uint32_t> out;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        for (auto& w : writes)
          out.insert(out.end(), w.chunks.begin(), w.chunks.end());
      }
      if (out.size() >= n || std::chrono::steady_clock::now() >= until)
        return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::vector<write> writes; // read it once the writer is done (or through chunks)

private:
  std::mutex mtx_;
  std::string name_ = "recording";
};

} // namespace rw::testing
