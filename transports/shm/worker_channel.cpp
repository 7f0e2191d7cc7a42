#include "transports/shm/worker_channel.hpp"

#include <unistd.h>

#include <random>

namespace rw::transports::shm {

namespace {
uint64_t random_nonce() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}
} // namespace

worker_channel::worker_channel(const job_spec& spec)
  : nonce_(random_nonce()), segment_(create_worker_segment(spec, nonce_)),
    header_(segment_.as<header>()) {}

void worker_channel::connect(const std::string& address, const std::string& ticket,
                             const job_spec& spec) {
  auto fds = collect_handover(address, ticket, std::chrono::seconds(10));
  if (fds.size() > 2) {
    for (int fd : fds)
      ::close(fd);
    throw std::runtime_error("the node handed over more than a doorbell and parameters");
  }
  int params = fds.size() == 2 ? fds[1] : -1;
  try {
    bell_ = adopt_node_bell(fds[0]);
  } catch (...) {
    if (params >= 0)
      ::close(params);
    throw;
  }
  if (params >= 0) {
    params_ = adopt_params_segment(params, spec);
    size_t total = 0;
    param_offsets_ = plan_params(spec, total);
  }
  segment_.unlink();
}

float* worker_channel::gradient(uint32_t tensor) const noexcept {
  return reinterpret_cast<float*>(segment_.data()
                                  + tensor_table(header_)[tensor].grad_offset);
}

const float* worker_channel::result(uint32_t tensor) const noexcept {
  if (params_.data() != nullptr)
    return reinterpret_cast<const float*>(params_.data() + param_offsets_[tensor]);
  return reinterpret_cast<const float*>(segment_.data()
                                        + tensor_table(header_)[tensor].result_offset);
}

void worker_channel::ring_node() noexcept {
  ring(bell_.as<node_bell_segment>()->bell);
}

void worker_channel::wait(int timeout_ms) {
  shm::wait(header_->worker_bell, timeout_ms,
            [&] { return !header_->completions.empty(); });
}

void worker_channel::wake() noexcept {
  ring(header_->worker_bell);
}

std::string worker_channel::error_text(uint32_t slot) const {
  auto& e = header_->errors[slot % error_slots];
  return std::string(e.text, strnlen(e.text, sizeof(e.text)));
}

} // namespace rw::transports::shm
