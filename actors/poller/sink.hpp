#pragma once
// A NIC poller's state and its frame sink, shared by the poller's parts:
// nic_poller.cpp (the actor: adopting connections, its behavior), sink.cpp (frame
// checks, the data path, closes), backpressure.cpp, idle.cpp,
// poller/admission.cpp (hello, attach, the welcome, adopting shared memory) and
// poller/probe.cpp (another node's rate probe: bytes taken and discarded).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "logic/limited_log.hpp"
#include "actors/poller/nic_poller.hpp"
#include "protocol/control.hpp"

namespace rw::actors::detail {

using protocol::frame_header;
using protocol::frame_kind;
using transports::connection_ptr;
using transports::payload_target;

struct binding {
  static binding joined_as(uint32_t job_id, uint32_t rank, routing_ptr routes,
                           uint32_t chunk_bytes, compression_spec compression,
                           std::string job_name = {}) {
    binding b;
    b.job_name = std::move(job_name);
    b.compression = compression;
    b.status = joined;
    b.job_id = job_id;
    b.rank = rank;
    b.shard_rank = rank;
    b.routes = std::move(routes);
    b.chunk_bytes = chunk_bytes;
    // Four steps of its pushes to this node: a worker in step holds at most one (BSP
    // holds a push until the ranks before it have summed; SSP and async hold none).
    const auto chunks = b.routes->local_chunks() + b.routes->replica_chunks();
    b.held_limit = std::max<int64_t>(int64_t{64} << 20,
                                     4 * static_cast<int64_t>(chunks) * chunk_bytes);
    return b;
  }

  enum status_t { joining, challenged, joined } status = joining;
  uint32_t job_id = 0;
  std::string job_name; // for logs ("" if the node did not say)
  uint32_t rank = 0;
  uint32_t shard_rank = 0; // the rank the shards know it by (a rack job's: in the rack)
  routing_ptr routes;
  routing_ptr previous; // the routes before the job's ring last changed (null: none)
  uint32_t chunk_bytes = 0;
  /// How the job's pushes travel: bf16 / fp16 pushes must carry 16-bit chunks (flagged),
  /// which the poller widens before a shard sees them.
  compression_spec compression;
  bool said_bye = false;
  uint64_t clock = 0;              // the latest clock this worker pushed
  transports::connection_ptr shm;  // the worker's adopted segment (TCP connections)
  transports::connection_ptr conn; // joined TCP connections: this one (for resend frames)
  bool shm_companion = false;      // this is such a segment (on the shm poller)
  transports::connection_ptr fabric; // the worker's fabric connection (TCP connections)
  transports::connection_ptr tcp;    // a fabric connection's TCP link (fabric poller)
  bool single_home = true;           // the job's chunks all live here (shm, fabric)
  /// Backpressure: the bytes of this peer's pushes the shards hold (each buffer counts
  /// until released), and the most they may; past it the poller stops reading the peer
  /// until they are back under half (TCP; fabric credits and shm rings bound the
  /// others already).
  std::shared_ptr<std::atomic<int64_t>> held = std::make_shared<std::atomic<int64_t>>(0);
  int64_t held_limit = int64_t{64} << 20;
  bool paused = false;
  uint64_t pauses = 0;
  std::chrono::steady_clock::time_point paused_at{};
  std::vector<std::byte> nonce; // challenged: the nonce sent
  protocol::hello_msg hello;    // challenged: the hello the proof is for
};

class poller_sink;

/// A rate probe being taken on one connection: the bytes so far (each frame counts its
/// header too, so empty frames add up) and when it began (a probe lasts at most
/// defaults::probe_max_ms, then its connection is closed and its slot is free).
struct probe_taken {
  uint64_t bytes = 0;   // payload bytes taken (what the ack reports)
  uint64_t charged = 0; // those and every frame's header, against probe_max_bytes
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  transports::connection_ptr conn; // to close it when it overstays
};

/// What a poller holds that outlives it: its supervisor keeps the book, so a poller
/// that dies is restarted on its endpoint with every connection's binding (chunk_shard's
/// book is the same idea; nic_poller.hpp, "Restart").
struct poller_book {
  rack_coordinator_actor coordinator;
  std::vector<chunk_shard_actor> shards;
  std::unordered_map<uint64_t, binding> bindings;                // by connection id
  std::map<size_t, std::unique_ptr<runtime::buffer_pool>> pools; // by buffer size
  caf::actor shm_poller; // set on TCP pollers when colocated workers may use shm
  std::string shm_bell;  // this process's name for it
  std::shared_ptr<transports::shm::handover> shm_handover; // hands it to welcomed workers
  /// The node's fabric endpoints (one per NIC) and their pollers, told to TCP pollers
  /// when the node runs fabric; a worker's offer goes to the least loaded.
  struct fabric_path {
    caf::actor poller;
    std::shared_ptr<transports::endpoint> ep;
  };
  std::vector<fabric_path> fabrics;
  /// Rate probes being taken: probe bytes so far, by connection id. Their payloads all
  /// land in one scratch buffer (allocated at the first probe) and are overwritten.
  std::unordered_map<uint64_t, probe_taken> probes;
  std::unique_ptr<std::byte[]> probe_scratch;
  /// Frames refused on connections that have not joined a job, by connection id: at
  /// defaults::max_stranger_refusals the connection is closed.
  std::unordered_map<uint64_t, uint32_t> strikes;
  /// Locates asked by connections that have not joined, by connection id, and whether
  /// one is being answered: defaults::max_stranger_locates each, one at a time.
  struct locates_asked {
    uint32_t count = 0;
    bool pending = false;
  };
  std::unordered_map<uint64_t, locates_asked> locates;
  uint32_t incarnation = 0; // pollers that have held this book before the current one
  /// Connections whose reading is paused (backpressure).
  std::vector<transports::connection_ptr> paused;
  // For /metrics (poller_stats): frames read, their bytes, frames refused.
  uint64_t frames_in = 0;
  uint64_t bytes_in = 0;
  uint64_t refused = 0;
};

struct poller_state {
  poller_settings settings;
  std::shared_ptr<transports::endpoint> ep;
  std::shared_ptr<poller_book> book;
  std::unique_ptr<poller_sink> sink;
  /// Pushes read in this round of the endpoint, by shard index: each shard gets them in
  /// one message at the round's end (poller_sink::flush), not one message per chunk.
  std::vector<std::vector<chunk_push>> outbox;
  bool stopping = false;
  /// When the poller next looks whether it has no job left (release_idle_buffers).
  std::chrono::steady_clock::time_point next_idle_check{};
  static inline const char* name = "rw.nic_poller";

  runtime::buffer_ref buffer(size_t bytes) {
    auto& pool = book->pools[bytes];
    if (!pool)
      pool = std::make_unique<runtime::buffer_pool>(bytes, 0, settings.numa);
    return pool->acquire();
  }
};

using poller_ptr = nic_poller_actor::stateful_pointer<poller_state>;

/// Closes rate probes that have lasted longer than defaults::probe_max_ms.
void end_overdue_probes(poller_ptr self);

/// At most once a second: when no connection of the poller is joined to a job, its
/// receive buffer pools give their memory back (the start's pool down to its
/// preallocated size, other sizes' pools entirely) and the poller logs how much.
void release_idle_buffers(poller_ptr self);

/// Counts push buffer `push` of connection `c` against its binding until a shard
/// releases it, and pauses reading `c` past the binding's limit.
void hold_against(poller_book& book, const transports::connection_ptr& c, binding& b,
                  runtime::payload& push);

/// Connections paused for backpressure whose pushes the shards have mostly released
/// (held below half the limit) read again; the ones that left are forgotten.
void resume_reading(poller_ptr self);

class poller_sink final : public transports::frame_sink {
public:
  explicit poller_sink(poller_ptr self) : self_(self) {}
  payload_target on_header(const connection_ptr& c, const frame_header& h) override;
  void on_frame(const connection_ptr& c, const frame_header& h,
                payload_target& t) override;
  // A sparse chunk becomes a dense one (zeros, plus each pair added at its index), so
  // shards sum it like any push and sparse and dense pushes combine exactly. Any
  // index out of range refuses the whole chunk: nothing of it is applied.
  void on_sparse(const connection_ptr& c, const frame_header& h, payload_target& t);
  /// A push of 16-bit values (compression bf16 / fp16), widened into a float32 chunk.
  void on_half(const connection_ptr& c, const frame_header& h, const std::byte* payload);
  // What both do: the chunk decoded into a pool buffer, then pushed as float32.
  template <class Decode>
  void as_dense(const connection_ptr& c, const frame_header& h, Decode decode);
  // Shared memory: the gradient is read in place, after the same checks as TCP frames.
  void on_resident_frame(const connection_ptr& c, const frame_header& h,
                         runtime::buffer_ref payload) override;
  void on_closed(const connection_ptr& c, errc code, const std::string& why) override;
  // Sends the round's pushes to their shards (one message per shard); before any other
  // message leaves the poller, so a shard sees a connection's frames in their order.
  void flush();

private:
  payload_target refuse(const connection_ptr& c, const frame_header& h, errc code,
                        const std::string& why);
  void on_frame_pull(const connection_ptr& c, const frame_header& h);
  /// A `state` frame (checked by check_data): to the shard of its chunk.
  void on_state(const connection_ptr& c, const frame_header& h,
                runtime::buffer_ref payload);
  uint64_t priority(const connection_ptr& c) const override;
  void dispatch_data(const connection_ptr& c, const frame_header& h,
                     runtime::buffer_ref payload);
  // The connection's binding, with `shard` set to the shard that serves the frame's
  // chunk now; null if there is none: the routes the frame was checked against when its
  // header came may have changed while its payload arrived (a reroute: a node joined or
  // drained). A chunk no longer homed here is dropped, as a frame of the ring the job
  // just left (the worker sends it again to its new home). One lookup per frame, as
  // before.
  binding* home_of(const connection_ptr& c, const frame_header& h, uint32_t& shard);
  // Checks a data frame against the connection's binding; refuses it (error frame)
  // and returns false if it does not fit.
  bool admissible(const connection_ptr& c, const frame_header& h);
  payload_target check_data(const connection_ptr& c, const frame_header& h,
                            bool allocate = true);
  void on_hello(const connection_ptr& c, const frame_header& h, payload_target& t);
  // Maps the worker's segment if it offered one and may use it; null otherwise.
  transports::connection_ptr adopt_shm(const connection_ptr& c, const job_binding& jb,
                                       const protocol::hello_msg& hello);
  // Puts in the welcome of a worker whose segment was adopted the ticket for the
  // doorbell and the job's shared parameters (transports/shm/handover.hpp).
  void offer_shm(protocol::welcome_msg& w, const job_binding& jb);
  void on_attach(const connection_ptr& c, const frame_header& h, payload_target& t);
  // The worker's answer to the challenge its hello got.
  void on_proof(const connection_ptr& c, const frame_header& h, payload_target& t);
  // Tells the asker where the cluster coordinator is.
  void on_locate(const connection_ptr& c, const frame_header& h);
  // A joined worker's fabric offer: a connection on the node's fabric endpoint, handed
  // to the fabric poller, and the node's offer back (or an error frame; the worker
  // goes on over TCP). poller/admission.cpp.
  void on_fabric(const connection_ptr& c, const frame_header& h, payload_target& t);
  // Rank 0 changes the job's hyper-parameters (frame `hyper`; poller/admission.cpp).
  void on_hyper(const connection_ptr& c, const frame_header& h, payload_target& t);
  // A rate probe frame: where its payload goes (the scratch buffer), or its refusal.
  payload_target on_probe_header(const connection_ptr& c, const frame_header& h);
  // A whole probe frame is in: answers the ack when asked.
  void on_probe(const connection_ptr& c, const frame_header& h);
  // Sends the challenge of a hello for a job with a token.
  void challenge(const connection_ptr& c, uint32_t rank, const job_binding& jb,
                 protocol::hello_msg hello);
  // Completes a hello or attach: binds the connection and sends the welcome, or sends
  // the refusal.
  template <class Handle>
  void join(const connection_ptr& conn, uint32_t rank, Handle pending,
            protocol::hello_msg hello = {});
  poller_ptr self_;
};

} // namespace rw::actors::detail
