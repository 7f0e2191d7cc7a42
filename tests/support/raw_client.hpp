#pragma once
// A deliberately plain protocol client for tests that must send what a real worker
// never would: garbage, truncated frames, wrong ids, duplicates. Blocking sockets,
// every read bounded by a timeout.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "protocol/control.hpp"
#include "protocol/frame.hpp"

namespace rw::testing {

struct raw_frame {
  protocol::frame_header header;
  std::vector<std::byte> payload;

  /// For error frames: the decoded code and message.
  protocol::error_msg error() const;
};

class raw_client {
public:
  explicit raw_client(const std::string& address);
  /// Connects from `from_host` (an address of this machine: 127.0.0.2, say).
  raw_client(const std::string& address, const std::string& from_host);
  ~raw_client();

  void send_bytes(const void* data, size_t size);
  void send_frame(const protocol::frame_header& h, const void* payload = nullptr);
  void send_floats(protocol::frame_header h, const std::vector<float>& values);

  /// The next frame, or nullopt if the peer closed or nothing came in time.
  std::optional<raw_frame> read_frame(
    std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// True if the peer closes the connection within the timeout (frames are skipped).
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Sends a hello for `spec` as `rank` (answering the challenge with `token` if the
  /// node sends one); returns the welcome's job id. A refusal throws rw::error with the
  /// error frame's code and message; anything else (no answer, an undecodable reply)
  /// std::runtime_error.
  uint32_t join(const job_spec& spec, uint32_t rank, const std::string& token = {});
  /// The same, returning the whole welcome. `spec_from_job`: the hello states only the
  /// name (and the tensors, for a job that has none yet), as for a created job.
  protocol::welcome_msg join_welcome(const job_spec& spec, uint32_t rank,
                                     const std::string& token = {},
                                     bool spec_from_job = false);
  /// Sends an attach frame carrying `proof`.
  void send_attach(uint32_t job_id, uint32_t rank, const protocol::attach_msg& proof);

  void close();

private:
  /// Reads n bytes into dst by the deadline; adds what it read to *counted if given.
  bool read_exact(std::byte* dst, size_t n,
                  std::chrono::steady_clock::time_point deadline,
                  size_t* counted = nullptr);
  /// Reads into pending_ until it holds n bytes or the deadline passes (what came stays).
  bool fill(size_t n, std::chrono::steady_clock::time_point deadline);
  int fd_ = -1;
  std::vector<std::byte> pending_; // a frame's bytes read before its deadline passed
};

} // namespace rw::testing
