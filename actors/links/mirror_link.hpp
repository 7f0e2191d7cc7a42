#pragma once
// A node's mirror link for one job with replicas (replicas = 1, a flat BSP job on two
// nodes or more): passive replication. Workers send each gradient to the chunk's home
// only; the home sums the step (rank order) and hands the sum here, and the link sends
// it to the chunk's replica node, which runs the same optimizer step on it. The home's
// step runs (and its workers hear of it) only once the replica has acked the sum, so a
// replica never lags a version a worker has seen: if the home dies, the replica holds
// every answered step, and workers send again what was not answered.
//
// Protocol
//   shard -> link      send(shard, tensor, chunk, clock, ring, node, sum)   (a call, on
//                      the shard's thread) the sum of step `clock`, copied here, for
//                      node `node` of ring `ring`
//   link  -> replica   push of `clock` with flag_replica, as protocol::mirror_rank of
//                      the job, on a connection said hello with Hello.mirror and the
//                      job's token proved (actors/links/job_join: join_as_mirror)
//   replica -> link    ack with flag_replica: the replica has the sum (it applies it
//                      in order); error frames are logged and the sum sent again;
//                      resend: a shard there was restarted, every unacked sum goes again
//   link  -> shard     (mirror_atom, job, [tensor, chunk, clock]...): those steps may
//                      run (the acks one read of the connections brought, per shard)
//   shard -> link      cancel(tensor, chunk): the step ran without the replica (a
//                      takeover left the chunk none)
// A sum not acked within retry_after is sent again (a cut connection is made again
// first): the replica drops a repeat and acks it, so a sum lost on the way, or an ack
// lost in a restarted shard's mailbox, costs a retry, not the job. A resend frame from
// the replica's node (one of its shards was restarted, and the sums in its mailbox
// died) sends every unacked sum again at once. The rack coordinator tells the link
// each ring the job takes (set_ring, before its shards use it) and each restarted
// shard (set_shard). One thread connects and reads; one sends,
// new sums first, in the order they came, up to send_batch of them per system call.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/shard/chunk_shard.hpp"
#include "actors/shard/outbox.hpp"
#include "actors/links/job_join.hpp"
#include "transports/receive_scratch.hpp"

namespace rw::actors {

struct mirror_settings {
  uint32_t job_id = 0;
  job_spec spec;         // with its tensors: the hello restates it
  std::string token;     // the job's token (its grant's secret)
  std::string node_name; // for logs
  std::vector<chunk_shard_actor> shards;
  std::chrono::milliseconds retry_after{1000};
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{5000};
};

class mirror_link final : public transports::frame_sink, public chunk_mirror {
public:
  explicit mirror_link(mirror_settings s);
  ~mirror_link() override;

  void start();
  /// Stops sending and joins the threads; the connections close. Idempotent.
  void stop();

  /// The job's ring `version`: HOST:PORT of each node, in ring order.
  void set_ring(uint64_t version, std::vector<std::string> addresses);
  /// Shard `index` was restarted: acks go to its successor.
  void set_shard(uint32_t index, chunk_shard_actor shard);

  // chunk_mirror (the job's shards)
  void send(uint32_t shard, uint32_t tensor, uint32_t chunk, uint64_t clock,
            uint64_t ring, uint32_t node, const float* sum, uint32_t length) override;
  void cancel(uint32_t tensor, uint32_t chunk) override;

  // frame_sink (the reading thread)
  transports::payload_target on_header(const transports::connection_ptr& c,
                                       const protocol::frame_header& h) override;
  void on_frame(const transports::connection_ptr& c, const protocol::frame_header& h,
                transports::payload_target& t) override;
  void on_closed(const transports::connection_ptr& c, errc code,
                 const std::string& why) override;

private:
  using key = std::pair<uint32_t, uint32_t>; // (tensor, chunk)
  using time_point = std::chrono::steady_clock::time_point;
  struct pending {
    uint32_t shard = 0;
    uint64_t clock = 0;
    uint64_t ring = 0;
    uint32_t node = 0;
    std::shared_ptr<const std::vector<float>> sum;
    time_point sent_at{}; // epoch: not sent yet
    bool warned = false;  // a refusal was logged
    bool queued = false;  // in fresh_
  };
  struct peer {
    transports::connection_ptr conn; // null: not connected
    time_point failed_at{};          // the last connect that failed
  };

  void read_loop();
  void send_loop();
  void connect_wanted();
  // Sends the sums queued in fresh_ (the caller holds mtx_, which the sends release
  // meanwhile); the ones whose node is not connected wait for a retry.
  void transmit(std::unique_lock<std::mutex>& lock);
  // Queues again every sum unacked for retry_after (mtx_ held).
  void queue_overdue();
  void flush_acks(); // the reading thread: the acks read, to their shards
  std::string address_of(uint64_t ring, uint32_t node) const; // mtx_ held

  mirror_settings s_;
  std::shared_ptr<transports::tcp::endpoint> ep_;
  mutable std::mutex mtx_;
  std::condition_variable wake_;
  std::map<uint64_t, std::vector<std::string>> rings_; // the newest few
  std::map<key, pending> pending_;
  std::deque<key> fresh_;                          // to send, oldest first
  std::map<uint32_t, std::vector<uint64_t>> acks_; // by shard: (tensor, chunk, clock)...
  std::map<std::string, peer> peers_;              // by address
  std::vector<std::string> wanted_; // addresses to connect to (the reading thread)
  // An error frame's text, per connection (the receiver thread's).
  transports::receive_scratch<> errors_;
  std::atomic<bool> running_{false};
  std::thread reader_;
  std::thread sender_;
};

} // namespace rw::actors
