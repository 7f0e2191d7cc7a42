#include "logic/shard_answers.hpp"

#include "runtime/trace.hpp"

namespace rw::actors::detail {

template <class Frame, class Conn, class Header, class Payload>
void shard_answers::send_grouped(std::vector<Frame>& frames, Conn conn_of,
                                 Header header_of, Payload payload_of) {
  std::vector<protocol::frame_header> headers;
  std::vector<iovec> payloads;
  std::vector<bool> sent(frames.size(), false);
  // Every peer's frames posted first, then waited for: where a transport writes from
  // the shard's memory after posting (fabric), the answers to every worker are in
  // flight at once rather than one worker's after another's.
  std::vector<std::pair<transports::connection_ptr, uint64_t>> posted;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (sent[i])
      continue;
    const auto& conn = conn_of(frames[i]);
    headers.clear();
    payloads.clear();
    for (size_t j = i; j < frames.size(); ++j) {
      if (sent[j] || conn_of(frames[j]) != conn)
        continue;
      sent[j] = true;
      headers.push_back(header_of(frames[j]));
      payloads.push_back(payload_of(frames[j]));
    }
    runtime::trace::scope traced{
      "send", "shard", {headers.front().job_id, headers.front().rank}};
    bool ok = true;
    auto mark = conn->post_batch(headers.data(), payloads.data(),
                                 static_cast<int>(headers.size()), ok);
    if (mark != 0)
      posted.emplace_back(conn, mark);
  }
  if (!posted.empty()) {
    runtime::trace::scope traced{"send wait", "shard"};
    for (auto& [conn, mark] : posted)
      conn->wait_sent(mark); // the payloads (the chunks' parameters) are free again
  }
  frames.clear();
}

bool shard_answers::send(const transports::connection_ptr& conn,
                         const protocol::frame_header& h, iovec payload) {
  return send(conn, h, payload, static_cast<const float*>(payload.iov_base));
}

bool shard_answers::send(const transports::connection_ptr& conn,
                         const protocol::frame_header& h, iovec payload,
                         const float* params) {
  if (!holding_)
    return payload.iov_len > 0 ? conn->send(h, &payload, 1) : conn->send(h);
  held_.push_back({conn, h, payload});
  if (payload.iov_len > 0)
    held_params_.insert(params);
  return true;
}

void shard_answers::flush() {
  send_grouped(
    held_,
    [](const held_frame& f) -> const transports::connection_ptr& { return f.conn; },
    [](const held_frame& f) { return f.header; },
    [](const held_frame& f) { return f.payload; });
  held_params_.clear();
}

bool shard_answers::add_replica_ack(const transports::connection_ptr& conn,
                                    const protocol::frame_header& h) {
  replica_acks_.emplace_back(conn, h);
  return replica_acks_.size() == 1;
}

void shard_answers::flush_replica_acks() {
  using ack = std::pair<transports::connection_ptr, protocol::frame_header>;
  send_grouped(
    replica_acks_,
    [](const ack& a) -> const transports::connection_ptr& { return a.first; },
    [](const ack& a) { return a.second; },
    [](const ack&) {
      return iovec{nullptr, 0};
    });
}

} // namespace rw::actors::detail
