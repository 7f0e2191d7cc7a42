#pragma once
// The frame sink a worker's join waits on (actors/links/job_join.cpp): the node's answer
// to a hello, a welcome or an error, or first a challenge, answered here with a proof
// of the job's token.

#include <string>

#include <fmt/format.h>

#include "protocol/control.hpp"
#include "rackweave/errc.hpp"
#include "runtime/credentials.hpp"
#include "transports/transport.hpp"

namespace rw::actors::detail {

// Receives the node's answer to the hello: a welcome or an error; or first a
// challenge, answered with a proof of the token.
using protocol::frame_header;
using protocol::frame_kind;
using transports::payload_target;

class handshake_sink final : public transports::frame_sink {
public:
  /// With `want_challenge` (a hello with a token), a welcome that no challenge came
  /// before is refused: the node did not check the token, so this is not that job.
  /// With `others`, only connection `mine` is the handshake's: frames and closes on the
  /// endpoint's other connections go to `others` (a running worker joining one more
  /// node: its link's connections carry on meanwhile).
  handshake_sink(const std::string& token, const std::string& job, uint32_t rank,
                 bool want_challenge, transports::frame_sink* others = nullptr,
                 transports::connection_ptr mine = nullptr)
    : token_(token), job_(job), rank_(rank), want_challenge_(want_challenge),
      others_(others), mine_(std::move(mine)) {}

  payload_target on_header(const transports::connection_ptr& c,
                           const frame_header& h) override {
    if (others_ != nullptr && c != mine_)
      return others_->on_header(c, h);
    if (h.kind != frame_kind::welcome && h.kind != frame_kind::error
        && h.kind != frame_kind::challenge)
      return payload_target::dropped();
    buf.resize(h.payload_bytes);
    return payload_target::into(buf.data());
  }
  void on_frame(const transports::connection_ptr& c, const frame_header& h,
                payload_target& t) override {
    if (others_ != nullptr && c != mine_)
      return others_->on_frame(c, h, t);
    if (t.action == payload_target::discard)
      return;
    std::string why;
    if (h.kind == frame_kind::challenge) {
      challenged_ = true;
      answer(c, h, why);
      return;
    }
    if (h.kind == frame_kind::welcome) {
      if (want_challenge_ && !challenged_) {
        fail(errc::unauthorized,
             "the node admitted this worker to job '" + job_
               + "' without checking its "
                 "token: that node runs an open job of that name, not the job the token "
                 "belongs to (check the job's node: rw.job_status(name).endpoints)");
        return;
      }
      if (decode(buf.data(), buf.size(), welcome, why) == errc::ok)
        answered = ok = true;
      else
        fail(errc::bad_frame, "undecodable welcome: " + why);
      return;
    }
    protocol::error_msg err;
    if (decode(buf.data(), buf.size(), err, why) != errc::ok)
      err = {errc::bad_frame, "undecodable error frame: " + why, {}};
    candidates = std::move(err.candidates);
    fail(err.code, err.message);
  }
  void on_closed(const transports::connection_ptr& c, errc code,
                 const std::string& why) override {
    if (others_ != nullptr && c != mine_)
      return others_->on_closed(c, code, why);
    if (!answered)
      fail(errc::io_error, "the node closed the connection during the hello: " + why);
  }

  // Proves the token: HMAC over the node's nonce (runtime/credentials).
  void answer(const transports::connection_ptr& c, const frame_header& h,
              std::string& why) {
    protocol::challenge_msg ch;
    if (decode(buf.data(), buf.size(), ch, why) != errc::ok) {
      fail(errc::bad_frame, "undecodable challenge: " + why);
      return;
    }
    if (token_.empty()) {
      fail(errc::unauthorized,
           "the node asks for the token of job '" + job_ + "' and this worker has none");
      return;
    }
    auto payload = protocol::encode(
      protocol::proof_msg{runtime::prove(token_, ch.nonce, job_, rank_)});
    frame_header p;
    p.kind = frame_kind::proof;
    p.rank = rank_;
    p.payload_bytes = static_cast<uint32_t>(payload.size());
    iovec iov{payload.data(), payload.size()};
    if (!c->send(p, &iov, 1))
      fail(errc::io_error, "cannot send the proof of the token to the node");
  }

  void fail(errc c, std::string m) {
    answered = true;
    ok = false;
    code = c;
    message = std::move(m);
  }

  std::vector<std::byte> buf;
  bool answered = false;
  bool ok = false;
  errc code = errc::ok;
  std::string message;
  std::vector<std::string> candidates; // with errc::moved: where to go instead
  protocol::welcome_msg welcome;

private:
  const std::string& token_;
  const std::string& job_;
  uint32_t rank_;
  bool want_challenge_;
  bool challenged_ = false;
  transports::frame_sink* others_;
  transports::connection_ptr mine_;
};

} // namespace rw::actors::detail
