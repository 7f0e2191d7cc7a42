#include "transports/tcp/connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "transports/tcp/address.hpp"

namespace rw::transports::tcp {

namespace {

// Frames read from one connection per poll round. The pushes a round reads go to the
// shards at its end (actors/poller), so a long round holds them there, and holds the
// other connections' frames in their sockets: under a CPU hog 64 frames took a starved
// poller 246 ms, and a takeover's resent chunks behind them waited that long
// (bench/failover.sh --hog 2). Eight frames (2 MiB of 256 KiB chunks) per connection
// keep rounds short; epoll reports the rest at once in the next round.
constexpr int max_frames_per_read = 8;
constexpr size_t discard_chunk = 64 * 1024;
// A gathered payload's memory starts at this much and doubles as its bytes fill it: a
// peer holds at most twice what it sent (and this).
constexpr size_t gather_step = 4 * 1024;

bool is_data_kind(protocol::frame_kind k) {
  return k == protocol::frame_kind::push || k == protocol::frame_kind::init
         || k == protocol::frame_kind::update || k == protocol::frame_kind::push_sparse
         || k == protocol::frame_kind::state; // one optimizer array of a chunk
}

// Moves past `sent` bytes of the gather list.
void advance(iovec*& iov, int& n, size_t sent) {
  while (n > 0 && sent >= iov->iov_len) {
    sent -= iov->iov_len;
    ++iov;
    --n;
  }
  if (n > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + sent;
    iov->iov_len -= sent;
  }
}

} // namespace

connection::connection(int fd, std::string peer, send_policy policy,
                       receive_limits limits)
  : fd_(fd), peer_(std::move(peer)), policy_(std::move(policy)), limits_(limits) {}

connection::~connection() {
  release_gather();
  ::close(fd_);
}

void connection::treat_as_stranger(std::shared_ptr<byte_budget> budget) {
  budget_ = std::move(budget);
  timed_ = true;
  quiet_since_ = clock::now();
  stranger_since_ = quiet_since_;
  admission_.store(admission::stranger, std::memory_order_release);
}

void connection::admit(admission a) {
  // A stranger again (its challenge sent, its locate answered): idle from now. Called on
  // the thread that drives the endpoint, as quiet_since_ is read there.
  auto before = admitted();
  auto now = clock::now();
  if (a == admission::stranger && before != admission::stranger) {
    quiet_since_ = now;
    stranger_since_ = now;
  }
  if (a != admission::stranger && before == admission::stranger && timed_)
    stranger_time_ += now - stranger_since_;
  admission_.store(a, std::memory_order_release);
}

std::string connection::overstayed(clock::time_point now,
                                   std::chrono::milliseconds limit) const {
  auto a = admitted();
  if (!timed_ || reported_ || a == admission::joined)
    return {};
  if (phase_ == phase::payload || got_ > 0) {
    if (now - frame_started_ < limit)
      return {};
    auto total = protocol::frame_header_bytes
                 + (phase_ == phase::payload ? header_.payload_bytes : 0);
    auto have = phase_ == phase::payload ? protocol::frame_header_bytes + got_ : got_;
    return fmt::format(
      "a frame not whole {} ms after its first byte ({} of {} bytes in): a "
      "peer that has not joined a job sends each frame whole within "
      "--first-frame-timeout-ms",
      limit.count(), have, total);
  }
  if (auto held = stranger_time_ + (now - stranger_since_);
      a == admission::stranger && held >= defaults::stranger_lifetimes * limit)
    return fmt::format(
      "held {} ms without joining a job (a peer that has not joined holds "
      "its connection at most {} x --first-frame-timeout-ms in all, "
      "however often it sends)",
      std::chrono::duration_cast<std::chrono::milliseconds>(held).count(),
      defaults::stranger_lifetimes);
  if (a == admission::waiting || now - quiet_since_ < limit)
    return {};
  if (!framed_)
    return fmt::format("no whole frame within {} ms of connecting (a hello, locate or "
                       "attach comes first)",
                       limit.count());
  return fmt::format("idle for {} ms without joining a job (--first-frame-timeout-ms)",
                     limit.count());
}

bool connection::grow_gather(size_t bytes) {
  if (budget_ && admitted() != admission::joined) {
    if (!budget_->take(bytes))
      return false;
    gather_charged_ += bytes;
  }
  std::vector<std::byte> bigger;
  bigger.reserve(gather_.size() + bytes);
  bigger.assign(gather_.begin(), gather_.end());
  bigger.resize(gather_.size() + bytes);
  gather_.swap(bigger);
  return true;
}

void connection::release_gather() noexcept {
  std::vector<std::byte>().swap(gather_);
  if (gather_charged_ > 0 && budget_)
    budget_->give(gather_charged_);
  gather_charged_ = 0;
}

bool connection::same_host() const noexcept {
  sockaddr_in local{}, remote{};
  socklen_t a = sizeof(local), b = sizeof(remote);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &a) != 0
      || getpeername(fd_, reinterpret_cast<sockaddr*>(&remote), &b) != 0
      || local.sin_family != AF_INET || remote.sin_family != AF_INET)
    return false;
  bool loopback = (ntohl(remote.sin_addr.s_addr) >> 24) == 127;
  return loopback || local.sin_addr.s_addr == remote.sin_addr.s_addr;
}

bool connection::is_open() const noexcept {
  return open_.load(std::memory_order_acquire);
}

void connection::close() {
  if (!open_.load(std::memory_order_acquire))
    return;
  if (policy_.queue_bytes > 0) {
    // What is queued goes out if the socket takes it now (an error frame before a
    // close, say); a peer that reads nothing does not hold the close up, nor does a
    // sender busy on the connection this instant.
    std::unique_lock<std::mutex> guard{send_mtx_, std::try_to_lock};
    if (guard.owns_lock() && !queue_.empty() && !write_failed_)
      queue_.drain(fd_); // best effort: a failure here is no reason of its own
  }
  // A blocked writer (a client's) sees the socket shut down and returns.
  if (open_.exchange(false))
    ::shutdown(fd_, SHUT_RDWR);
}

size_t connection::queued_bytes() const {
  std::lock_guard<std::mutex> guard{send_mtx_};
  return queue_.bytes();
}

bool connection::send(const protocol::frame_header& h, const iovec* payload, int count) {
  alignas(8) std::byte head[protocol::frame_header_bytes];
  encode(h, head);
  iovec local[8];
  std::vector<iovec> heap;
  iovec* iov = local;
  if (count + 1 > 8) {
    heap.resize(static_cast<size_t>(count) + 1);
    iov = heap.data();
  }
  iov[0] = {head, protocol::frame_header_bytes};
  for (int i = 0; i < count; ++i)
    iov[i + 1] = payload[i];
  std::lock_guard<std::mutex> guard{send_mtx_};
  return write(iov, count + 1);
}

bool connection::send_batch(const protocol::frame_header* headers, const iovec* payloads,
                            int n) {
  constexpr int per_write = 256; // frames per gather write (2 pieces each, < IOV_MAX)
  alignas(8) std::byte heads[per_write][protocol::frame_header_bytes];
  iovec iov[2 * per_write];
  std::lock_guard<std::mutex> guard{send_mtx_};
  for (int first = 0; first < n; first += per_write) {
    int count = std::min(per_write, n - first);
    int pieces = 0;
    for (int i = 0; i < count; ++i) {
      encode(headers[first + i], heads[i]);
      iov[pieces++] = {heads[i], protocol::frame_header_bytes};
      if (payloads[first + i].iov_len > 0)
        iov[pieces++] = payloads[first + i];
    }
    if (!write(iov, pieces))
      return false;
  }
  return true;
}

bool connection::write(iovec* iov, int n) {
  return policy_.queue_bytes > 0 ? write_or_queue(iov, n) : write_all(iov, n);
}

// A send that fails stops this side's writing only: frames the peer sent before it
// went (a bye, say) are still read, and the receiver reports the close.
bool connection::give_up(errc code, std::string why) {
  if (!write_failed_.exchange(true)) {
    {
      std::lock_guard<std::mutex> guard{reason_mtx_};
      give_up_code_ = code;
      give_up_why_ = std::move(why);
    }
    queue_.clear();
    ::shutdown(fd_, SHUT_WR);
  }
  return false;
}

bool connection::write_all(iovec* iov, int n) {
  auto deadline = clock::now() + policy_.io_timeout;
  while (n > 0) {
    if (!is_open() || write_failed_)
      return false;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return give_up(errc::io_error,
                       fmt::format("send failed: {}", std::strerror(errno)));
      auto now = clock::now();
      if (now >= deadline) {
        // The peer stopped reading: a half-sent frame would corrupt the stream.
        return cut_off(fmt::format("the peer took nothing for {} ms (--io-timeout-ms)",
                                   policy_.io_timeout.count()));
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count() + 1, 1, 100)));
      continue;
    }
    advance(iov, n, static_cast<size_t>(sent));
  }
  return true;
}

bool connection::write_or_queue(iovec* iov, int n) {
  if (!is_open() || write_failed_)
    return false;
  if (!queue_.empty() && !flush_queue())
    return false;
  if (queue_.empty()) {
    // Straight from the caller's memory, as far as the socket takes it now.
    while (n > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          break;
        return give_up(errc::io_error,
                       fmt::format("send failed: {}", std::strerror(errno)));
      }
      advance(iov, n, static_cast<size_t>(sent));
    }
    if (n == 0)
      return true;
  }
  // The bound is on what waits already: one call may overshoot it (a large chunk, a
  // batch of updates), but a peer only falls behind it by not reading.
  if (queue_.bytes() > policy_.queue_bytes) {
    auto why = fmt::format("the peer is not reading: {} bytes wait to be sent to it, the "
                           "limit is {} (--send-queue-mib)",
                           queue_.bytes(), policy_.queue_bytes);
    return cut_off(std::move(why));
  }
  if (queue_.empty()) {
    last_progress_ = clock::now();
    if (policy_.waker)
      policy_.waker->watch(fd_, !paused_, true);
  }
  queue_.append(iov, n);
  return true;
}

bool connection::flush_queue() {
  auto sent = queue_.drain(fd_);
  if (sent < 0)
    return give_up(errc::io_error, fmt::format("send failed: {}", std::strerror(errno)));
  if (sent > 0)
    last_progress_ = clock::now();
  if (queue_.empty() && policy_.waker)
    policy_.waker->watch(fd_, !paused_, false);
  return true;
}

bool connection::cut_off(std::string why) {
  give_up(errc::timeout, std::move(why));
  open_.store(false, std::memory_order_release);
  ::shutdown(fd_, SHUT_RDWR); // the receiving side reads the end and reports `why`
  return false;
}

std::pair<errc, std::string> connection::why_writing_stopped() const {
  std::lock_guard<std::mutex> guard{reason_mtx_};
  return {give_up_code_, give_up_why_};
}

void connection::write_ready() {
  std::lock_guard<std::mutex> guard{send_mtx_};
  if (write_failed_ || queue_.empty()) {
    if (policy_.waker)
      policy_.waker->watch(fd_, !paused_, false);
    return;
  }
  flush_queue();
}

void connection::pause_reading(bool paused) {
  if (!policy_.waker)
    return; // a client's connection: its reader is its own thread
  std::lock_guard<std::mutex> guard{send_mtx_};
  if (paused_ == paused)
    return;
  paused_ = paused;
  reading_paused_.store(paused, std::memory_order_release);
  policy_.waker->watch(fd_, !paused, !queue_.empty() && !write_failed_);
  if (!paused)
    policy_.waker->kick(fd_); // a frame read before the pause waits for no event
}

bool connection::check_stalled(clock::time_point now) {
  std::lock_guard<std::mutex> guard{send_mtx_};
  if (queue_.empty() || write_failed_ || now - last_progress_ < policy_.io_timeout)
    return false;
  cut_off(fmt::format("the peer took nothing of the {} bytes waiting for it for {} ms "
                      "(--io-timeout-ms)",
                      queue_.bytes(), policy_.io_timeout.count()));
  return true;
}

void connection::report_closed(frame_sink& sink, errc code, const std::string& why) {
  if (reported_)
    return;
  reported_ = true;
  close();
  target_ = {};
  release_gather();
  sink.on_closed(shared_from_this(), code, why);
}

bool connection::fail(frame_sink& sink, errc code, const std::string& why,
                      bool tell_peer) {
  if (tell_peer && is_open())
    send_error(code, why, header_);
  report_closed(sink, code, why);
  return false;
}

void connection::cut(frame_sink& sink, errc code, const std::string& why) {
  fail(sink, code, why, true);
}

bool connection::read_ready(frame_sink& sink) {
  if (reported_)
    return false;
  auto self = shared_from_this();
  std::byte scratch[discard_chunk];
  bool took = false; // bytes this round: acknowledged at its end (ack_now)
  for (int frames = 0; frames < max_frames_per_read;) {
    // Backpressure: the rest stays in the socket until reading resumes.
    if (reading_paused_.load(std::memory_order_acquire) && phase_ == phase::header)
      return done_reading(took);
    // A header that arrived with the previous payload needs no read.
    bool header_ready = phase_ == phase::header && got_ == protocol::frame_header_bytes;
    ssize_t n = 0;
    if (!header_ready) {
      if (phase_ == phase::header) {
        n = ::recv(fd_, header_buf_ + got_, protocol::frame_header_bytes - got_, 0);
      } else if (target_.action == payload_target::discard) {
        n = ::recv(fd_, scratch,
                   std::min(discard_chunk, size_t{header_.payload_bytes} - got_), 0);
      } else if (target_.action == payload_target::gather) {
        // Memory taken as the payload arrives, not as its header announces it.
        size_t want = header_.payload_bytes - got_;
        if (gather_.size() == got_
            && !grow_gather(std::min(want, std::max(gather_step, gather_.size())))) {
          return fail(
            sink, errc::unavailable,
            fmt::format("this node holds {} bytes for connections that have not "
                        "joined a job (at most {}, --max-unjoined-mib): try again "
                        "later",
                        budget_->held(), budget_->limit()),
            true);
        }
        n = ::recv(fd_, gather_.data() + got_, std::min(want, gather_.size() - got_), 0);
      } else {
        // The payload's rest, and as much of the next header as has arrived: most
        // frames then cost one read.
        iovec iov[2] = {{target_.dst + got_, header_.payload_bytes - got_},
                        {header_buf_, protocol::frame_header_bytes}};
        n = ::readv(fd_, iov, 2);
      }
      if (n < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return done_reading(took);
        auto error = errno;
        if (auto [code, why] = why_writing_stopped(); code != errc::ok && !is_open())
          return fail(sink, code, why, false); // cut off here: the peer then saw a reset
        return fail(sink, errc::io_error,
                    fmt::format("receive failed: {}", std::strerror(error)), false);
      }
      if (n == 0) {
        if (!is_open()) {
          auto [code, why] = why_writing_stopped();
          if (code != errc::ok)
            return fail(sink, code, why, false);
          return fail(sink, errc::io_error, "connection closed locally", false);
        }
        if (phase_ == phase::header && got_ == 0)
          return fail(sink, errc::ok, "peer closed the connection", false);
        auto total = phase_ == phase::header
                       ? protocol::frame_header_bytes
                       : protocol::frame_header_bytes + header_.payload_bytes;
        auto have = phase_ == phase::header ? got_ : protocol::frame_header_bytes + got_;
        return fail(
          sink, errc::bad_frame,
          fmt::format("truncated frame: peer closed after {} of {} bytes", have, total),
          false);
      }
    }
    took = took || n > 0;
    if (phase_ == phase::header && got_ == 0 && n > 0 && timing())
      frame_started_ = clock::now();
    got_ += static_cast<size_t>(n);
    if (phase_ == phase::payload && got_ > header_.payload_bytes) {
      spill_ = got_ - header_.payload_bytes; // the next header's first bytes
      got_ = header_.payload_bytes;
    }
    if (phase_ == phase::header) {
      if (got_ < protocol::frame_header_bytes)
        continue;
      std::string why;
      auto rc = decode(header_buf_, header_, why);
      if (rc != errc::ok) {
        header_ = {};
        return fail(sink, rc, why, true);
      }
      auto limit = is_data_kind(header_.kind) ? limits_.max_data_payload
                                              : limits_.max_control_payload;
      if (header_.payload_bytes > limit)
        return fail(sink, errc::frame_too_large,
                    fmt::format("{} frame announces {} payload bytes; the limit is {}",
                                to_string(header_.kind), header_.payload_bytes, limit),
                    true);
      got_ = 0;
      target_ = sink.on_header(self, header_);
      if (target_.action == payload_target::close)
        return fail(sink, errc::bad_frame, "closed by the receiver", false);
      if (header_.payload_bytes > 0) {
        phase_ = phase::payload;
        continue;
      }
    } else if (got_ < header_.payload_bytes) {
      continue;
    }
    // A whole frame is in.
    phase_ = phase::header;
    got_ = spill_;
    spill_ = 0;
    auto target = std::move(target_);
    target_ = {};
    framed_ = true;
    if (timing()) {
      quiet_since_ = clock::now();
      frame_started_ = quiet_since_; // the next header's first bytes, if they came along
    }
    if (target.action == payload_target::gather)
      target.dst = gather_.data();
    sink.on_frame(self, header_, target);
    release_gather();
    ++frames;
    if (reported_)
      return false;
  }
  // At the limit: a whole header already read (one that came along with the last
  // payload, such as a pull's) waits for no event, so the next round looks here again.
  if (policy_.waker)
    policy_.waker->kick(fd_);
  return done_reading(took);
}

bool connection::done_reading(bool took) noexcept {
  if (took && is_open())
    ack_now(fd_);
  return true;
}

} // namespace rw::transports::tcp
