#pragma once
// Codecs for the control payloads (schemas/control.capnp) carried by hello, welcome
// and error frames. Decoders take untrusted bytes: they never throw, they bound the
// work Cap'n Proto may do, and they say what is wrong.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"

namespace rw::transports {

using bytes = std::vector<std::byte>;

struct hello_msg {
  job_spec spec;
  uint32_t rank = 0;
  std::string shm_segment; // empty: TCP only
  uint64_t shm_nonce = 0;
};

struct welcome_msg {
  uint32_t job_id = 0;
  std::string node_name;
  bool created = false;
  std::vector<std::string> endpoints;
  uint32_t endpoint_index = 0;
  uint32_t num_shards = 1;
  std::vector<std::vector<uint32_t>> shard_endpoints;
  uint64_t token = 0;
  bool shm = false;
  std::string shm_bell;
  std::string shm_params;
};

struct error_msg {
  errc code = errc::internal;
  std::string message;
};

bytes encode(const hello_msg& x);
bytes encode(const welcome_msg& x);
bytes encode(const error_msg& x);

/// Each returns errc::ok or errc::bad_frame with `why` set.
errc decode(const std::byte* data, size_t size, hello_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, welcome_msg& out, std::string& why);
errc decode(const std::byte* data, size_t size, error_msg& out, std::string& why);

} // namespace rw::transports
