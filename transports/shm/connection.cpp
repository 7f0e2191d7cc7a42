#include "transports/shm/connection.hpp"

#include "protocol/control.hpp"

#include <fmt/format.h>

namespace rw::transports::shm {

connection::connection(mapping segment, const job_spec& spec, std::string peer,
                       uint32_t job_id, uint32_t rank, bool worker_reads_params)
  : segment_(std::move(segment)), header_(segment_.as<header>()),
    tensors_(plan_regions(spec, planned_bytes_)), peer_(std::move(peer)), job_id_(job_id),
    rank_(rank), worker_reads_params_(worker_reads_params) {
  for (auto& t : spec.tensors)
    layouts_.emplace_back(t.elements, spec.chunk_bytes);
}

bool connection::is_open() const noexcept {
  return open_.load(std::memory_order_acquire);
}

void connection::close() {
  if (open_.exchange(false))
    ring(header_->worker_bell); // let a sleeping worker look again
}

std::byte* connection::gradient(uint32_t tensor, uint32_t chunk,
                                uint32_t& bytes) const noexcept {
  if (tensor >= layouts_.size() || chunk >= layouts_[tensor].count())
    return nullptr;
  auto& l = layouts_[tensor];
  bytes = l.length(chunk) * sizeof(float);
  return segment_.data() + tensors_[tensor].grad_offset + l.offset(chunk) * sizeof(float);
}

void connection::set_send_limits(std::chrono::milliseconds io_timeout,
                                 uint64_t backlog_bytes) {
  std::lock_guard<std::mutex> guard{post_mtx_};
  io_timeout_ = io_timeout;
  backlog_limit_ = backlog_bytes;
}

void connection::cut_locked(std::string why) noexcept {
  if (close_reason_.empty())
    close_reason_ = std::move(why);
  backlog_list_.clear();
  backlog_.store(false, std::memory_order_release);
  close();
}

std::pair<errc, std::string> connection::close_reason() const {
  std::lock_guard<std::mutex> guard{post_mtx_};
  if (close_reason_.empty())
    return {errc::ok, {}};
  return {errc::timeout, close_reason_};
}

bool connection::post(const completion& c) noexcept {
  {
    std::lock_guard<std::mutex> guard{post_mtx_};
    if (!is_open())
      return false;
    // In order: nothing overtakes what waits in the backlog.
    if (!backlog_list_.empty() || !header_->completions.push(c)) {
      if ((backlog_list_.size() + 1) * sizeof(completion) > backlog_limit_) {
        cut_locked(
          fmt::format("the worker is not taking its completions: {} wait for room "
                      "in its ring, the limit is {} bytes (--send-queue-mib)",
                      backlog_list_.size() + 1, backlog_limit_));
        return false;
      }
      if (backlog_list_.empty())
        last_progress_ = std::chrono::steady_clock::now();
      backlog_list_.push_back(c);
      backlog_.store(true, std::memory_order_release);
    }
  }
  ring(header_->worker_bell);
  return true;
}

void connection::flush_backlog() {
  {
    std::lock_guard<std::mutex> guard{post_mtx_};
    if (backlog_list_.empty())
      return;
    size_t moved = 0;
    while (!backlog_list_.empty() && header_->completions.push(backlog_list_.front())) {
      backlog_list_.pop_front();
      ++moved;
    }
    auto now = std::chrono::steady_clock::now();
    if (moved > 0)
      last_progress_ = now;
    if (backlog_list_.empty()) {
      backlog_.store(false, std::memory_order_release);
    } else if (now - last_progress_ >= io_timeout_) {
      cut_locked(fmt::format("the worker took none of its completions for {} ms with {} "
                             "waiting (--io-timeout-ms)",
                             io_timeout_.count(), backlog_list_.size()));
      return;
    }
    if (moved == 0)
      return;
  }
  ring(header_->worker_bell);
}

void connection::consumed(uint32_t tensor, uint32_t chunk, uint64_t clock) noexcept {
  post({completion::consumed, 0, tensor, chunk, 0, clock});
}

bool connection::send(const protocol::frame_header& h, const iovec* payload, int count) {
  if (!is_open())
    return false;
  switch (h.kind) {
    case protocol::frame_kind::update: {
      if (h.tensor_id >= layouts_.size()
          || h.chunk_index >= layouts_[h.tensor_id].count())
        return false;
      uint16_t kind = (h.flags & protocol::flag_subscribe) ? completion::published
                                                           : completion::update;
      if (worker_reads_params_)
        return post({kind, 0, h.tensor_id, h.chunk_index, h.staleness, h.clock});
      auto& l = layouts_[h.tensor_id];
      auto* dst = segment_.data() + tensors_[h.tensor_id].result_offset
                  + l.offset(h.chunk_index) * sizeof(float);
      size_t room = l.length(h.chunk_index) * sizeof(float);
      for (int i = 0; i < count; ++i) {
        auto n = std::min(room, payload[i].iov_len);
        std::memcpy(dst, payload[i].iov_base, n); // the shard writes the result in place
        dst += n;
        room -= n;
      }
      return post({kind, 0, h.tensor_id, h.chunk_index, h.staleness, h.clock});
    }
    case protocol::frame_kind::error: {
      auto slot = header_->next_error.fetch_add(1) % error_slots;
      // The error text is the control payload; store its message part only.
      std::string text;
      for (int i = 0; i < count; ++i)
        text.append(static_cast<const char*>(payload[i].iov_base), payload[i].iov_len);
      protocol::error_msg err;
      std::string why;
      if (decode(reinterpret_cast<const std::byte*>(text.data()), text.size(), err, why)
          != errc::ok)
        err.message = "an error the node could not encode";
      auto& e = header_->errors[slot];
      auto n = std::min(err.message.size(), sizeof(e.text) - 1);
      std::memcpy(e.text, err.message.data(), n);
      e.text[n] = '\0';
      return post({completion::error, static_cast<uint16_t>(h.error_code), h.tensor_id,
                   h.chunk_index, slot, h.clock});
    }
    case protocol::frame_kind::ack:
      if (h.flags & protocol::flag_only_changed)
        return post({completion::unchanged, 0, h.tensor_id, h.chunk_index, 0, h.clock});
      return true; // a push's ack: over shm a push completes when its memory is consumed
    default: return true;
  }
}

} // namespace rw::transports::shm
