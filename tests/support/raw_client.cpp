#include "tests/support/raw_client.hpp"

#include "runtime/credentials.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "transports/tcp/address.hpp"

namespace rw::testing {

protocol::error_msg raw_frame::error() const {
  protocol::error_msg e;
  std::string why;
  if (decode(payload.data(), payload.size(), e, why) != errc::ok)
    throw std::runtime_error("undecodable error frame: " + why);
  return e;
}

raw_client::raw_client(const std::string& address) {
  fd_ = transports::tcp::connect_to(transports::tcp::parse_address(address),
                                    std::chrono::seconds(5));
}

raw_client::raw_client(const std::string& address, const std::string& from_host) {
  auto to = transports::tcp::parse_address(address);
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0)
    throw std::runtime_error("socket failed");
  sockaddr_in from{}, dst{};
  from.sin_family = AF_INET;
  dst.sin_family = AF_INET;
  dst.sin_port = htons(to.port);
  if (::inet_pton(AF_INET, from_host.c_str(), &from.sin_addr) != 1
      || ::inet_pton(AF_INET, to.host.c_str(), &dst.sin_addr) != 1
      || ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0
      || ::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot connect to " + address + " from " + from_host);
  }
}

raw_client::~raw_client() {
  close();
}

void raw_client::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

void raw_client::send_bytes(const void* data, size_t size) {
  auto* p = static_cast<const char*>(data);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      throw std::runtime_error("send failed");
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("send timed out");
    pollfd pfd{fd_, POLLOUT, 0};
    ::poll(&pfd, 1, 50);
  }
}

void raw_client::send_frame(const protocol::frame_header& h, const void* payload) {
  alignas(8) std::byte head[protocol::frame_header_bytes];
  protocol::encode(h, head);
  size_t payload_bytes = payload != nullptr ? h.payload_bytes : 0;
  auto* body = static_cast<const std::byte*>(payload);
  // Header and payload in one gather write, as a worker sends them: a node that refuses
  // the frame on its header and closes cannot do it between two writes, which would
  // fail the second with EPIPE before the refusal could be read.
  size_t total = sizeof(head) + payload_bytes, done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (done < total) {
    iovec iov[2];
    int parts = 0;
    if (done < sizeof(head))
      iov[parts++] = {head + done, sizeof(head) - done};
    size_t body_done = done > sizeof(head) ? done - sizeof(head) : 0;
    if (body_done < payload_bytes)
      iov[parts++] = {const_cast<std::byte*>(body + body_done),
                      payload_bytes - body_done};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(parts);
    ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      throw std::runtime_error(
        fmt::format("send failed after {} of a frame's {} bytes: {}", done, total,
                    std::strerror(errno)));
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("send timed out");
    pollfd pfd{fd_, POLLOUT, 0};
    ::poll(&pfd, 1, 50);
  }
}

void raw_client::send_floats(protocol::frame_header h, const std::vector<float>& values) {
  h.payload_bytes = static_cast<uint32_t>(values.size() * sizeof(float));
  send_frame(h, values.data());
}

bool raw_client::read_exact(std::byte* dst, size_t n,
                            std::chrono::steady_clock::time_point deadline,
                            size_t* counted) {
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) <= 0)
      continue;
    ssize_t got = ::recv(fd_, dst, n, 0);
    if (got == 0)
      return false;
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return false;
    }
    dst += got;
    n -= static_cast<size_t>(got);
    if (counted != nullptr)
      *counted += static_cast<size_t>(got);
  }
  return true;
}

bool raw_client::fill(size_t n, std::chrono::steady_clock::time_point deadline) {
  if (pending_.size() >= n)
    return true;
  auto have = pending_.size();
  pending_.resize(n);
  bool whole = read_exact(pending_.data() + have, n - have, deadline, &have);
  pending_.resize(have);
  return whole;
}

std::optional<raw_frame> raw_client::read_frame(std::chrono::milliseconds timeout) {
  // A frame not whole by the deadline stays in pending_ for the next call: dropping
  // the bytes read so far left the next read in the middle of a frame.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!fill(protocol::frame_header_bytes, deadline))
    return std::nullopt;
  alignas(8) std::byte head[protocol::frame_header_bytes];
  std::memcpy(head, pending_.data(), sizeof(head));
  raw_frame f;
  std::string why;
  if (protocol::decode(head, f.header, why) != errc::ok)
    throw std::runtime_error("the node sent an undecodable header: " + why);
  auto total = sizeof(head) + size_t{f.header.payload_bytes};
  if (!fill(total, deadline))
    return std::nullopt;
  f.payload.assign(pending_.begin() + static_cast<std::ptrdiff_t>(sizeof(head)),
                   pending_.begin() + static_cast<std::ptrdiff_t>(total));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(total));
  return f;
}

bool raw_client::closed_by_peer(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::byte sink[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0)
      continue;
    ssize_t got = ::recv(fd_, sink, sizeof(sink), 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
      return true;
  }
  return false;
}

uint32_t raw_client::join(const job_spec& spec, uint32_t rank, const std::string& token) {
  return join_welcome(spec, rank, token).job_id;
}

protocol::welcome_msg raw_client::join_welcome(const job_spec& spec, uint32_t rank,
                                               const std::string& token,
                                               bool spec_from_job) {
  protocol::hello_msg hello;
  hello.spec = spec;
  hello.spec_from_job = spec_from_job;
  hello.rank = rank;
  hello.has_token = !token.empty();
  auto payload = protocol::encode(hello);
  protocol::frame_header h;
  h.kind = protocol::frame_kind::hello;
  h.rank = rank;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  send_frame(h, payload.data());
  auto f = read_frame();
  if (f && f->header.kind == protocol::frame_kind::challenge) {
    protocol::challenge_msg ch;
    std::string why;
    if (decode(f->payload.data(), f->payload.size(), ch, why) != errc::ok)
      throw std::runtime_error("undecodable challenge: " + why);
    auto proof = protocol::encode(
      protocol::proof_msg{runtime::prove(token, ch.nonce, spec.name, rank)});
    protocol::frame_header p;
    p.kind = protocol::frame_kind::proof;
    p.rank = rank;
    p.payload_bytes = static_cast<uint32_t>(proof.size());
    send_frame(p, proof.data());
    f = read_frame();
  }
  if (!f)
    throw std::runtime_error("no answer to hello");
  if (f->header.kind == protocol::frame_kind::error) {
    auto e = f->error();
    throw rw::error(e.code, e.message); // the node's refusal, with its code
  }
  protocol::welcome_msg w;
  std::string why;
  if (decode(f->payload.data(), f->payload.size(), w, why) != errc::ok)
    throw std::runtime_error(why);
  return w;
}

void raw_client::send_attach(uint32_t job_id, uint32_t rank,
                             const protocol::attach_msg& proof) {
  auto payload = protocol::encode(proof);
  protocol::frame_header h;
  h.kind = protocol::frame_kind::attach;
  h.job_id = job_id;
  h.rank = rank;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  send_frame(h, payload.data());
}

} // namespace rw::testing
