#pragma once
// The worker's connections to its job's nodes (one per node endpoint, all driven by one
// receiver thread; a job on several nodes has every node's endpoints, node by node), shared by the worker proxy (which arms a tensor's slot, then sends
// each chunk on the connection of the chunk's endpoint) and the receiver. An
// `update` payload is received straight into the caller's output buffer at the
// chunk's offset; `ack`, `update` and `error` frames are counted against the armed
// operation and reported to the proxy, each chunk once (a repeated answer, to a
// re-sent request, is ignored). Frames that belong to no armed operation (late answers
// to a failed one) are dropped. A `resend` frame (a shard of the node restarted) goes
// to the proxy as link_events::resend(connection index, shard). A `reroute` frame (the job's
// nodes changed: a node was drained) makes the link route by the new ring (set_basis)
// and stop using the connections to nodes that left it (their closing is expected, not
// a loss); then the proxy hears link_events::reroute(connection index) and re-sends what is
// unanswered for the chunks homed on that connection's node. A reroute that names a
// node the worker has no connection to (it joined the job) is taken between two polls:
// the receiver says hello to that node (the joiner given to set_basis), appends its
// connections, then routes by the new ring and has the proxy re-send what is homed
// there too. A node whose connections close under a running worker (a cut link; a node
// that closed them) is said hello to again the same way, as the same rank, for up to
// defaults::reconnect_window_ms (a refused connect ends that at once): its new
// connections take the old ones' places and the proxy re-sends what that node serves
// and has not answered. Only then is the loss the job's (with replicas: the node's
// replicas take over; without: every operation fails). Reroutes, joins and hellos
// again live in worker/link_nodes.cpp.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/links/job_join.hpp"
#include "runtime/chunking.hpp"
#include "transports/receive_scratch.hpp"
#include "transports/shm/worker_channel.hpp"
#include "transports/transport.hpp"
#include "worker/answer_slots.hpp"
#include "worker/link_events.hpp"

namespace rw::actors {

class worker_link final : public transports::frame_sink {
public:
  /// `conns[e]` is connection e (runtime::job_routes: a node's endpoints in order,
  /// node after node); `routes` says which connection each chunk travels on.
  /// With `shm`, chunk data travels through the worker's shared memory segment and
  /// `conns` carry only control.
  worker_link(std::shared_ptr<transports::endpoint> ep,
              std::vector<transports::connection_ptr> conns, uint32_t job_id,
              uint32_t rank, std::shared_ptr<const runtime::job_routes> routes,
              std::unique_ptr<transports::shm::worker_channel> shm = nullptr);

  /// The shared memory channel, or null over TCP.
  transports::shm::worker_channel* shm() const noexcept { return shm_.get(); }
  /// Chunks travel over libfabric: `fabric` is the worker's fabric endpoint (its one
  /// connection is conns[0]) and `companion` the TCP connection kept for liveness;
  /// either closing loses the link (no reconnect over fabric). Before start().
  void use_fabric(std::shared_ptr<transports::endpoint> fabric,
                  transports::connection_ptr companion);
  /// Registers [p, p + n) with the fabric NIC now (fabric::endpoint::pin), for as long
  /// as the handle lives; null where chunks do not travel over libfabric.
  std::shared_ptr<void> pin(const void* p, size_t n) const;
  /// Registrations the fabric endpoint made: for sends, and for placed results (0, 0
  /// without fabric).
  std::pair<uint64_t, uint64_t> fabric_registrations() const noexcept;
  /// The TCP connection beside a fabric link, or null.
  const transports::connection_ptr& companion() const noexcept { return companion_; }
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  ~worker_link() override;

  /// Starts the receiver thread, reporting to `events` (the proxy's).
  void start(std::shared_ptr<link_events> events);
  /// Closes the connection (with `why` as the reason reported) and joins the receiver.
  void stop(const std::string& why);

  /// Joins one more node of the job (named, at HOST:PORT, on the ring of that
  /// version), its frames on the link's connections going to the given sink meanwhile;
  /// throws rw::error (actors/links/job_join.hpp join_node).
  using node_joiner =
    std::function<joined_node(const std::string& node, const std::string& address,
                              uint64_t ring_version, transports::frame_sink& others)>;

  /// A job on several nodes: how to route it by a later ring, and how to join a node
  /// that ring adds (before start()).
  void set_basis(std::shared_ptr<const runtime::routes_basis> basis,
                 uint32_t replicas = 0, node_joiner joiner = nullptr) {
    if (basis)
      ring_version_ = basis->version;
    multi_node_ = basis != nullptr;
    if (basis)
      ring_nodes_ = basis->names;
    basis_ = std::move(basis);
    replicas_ = replicas;
    joiner_ = std::move(joiner);
  }

  /// Whether the job's chunks have replicas on other nodes (a push_pull's answer then
  /// waits for the replica's ack of the step's sum too).
  bool replicated() const noexcept { return multi_node_ && replicas_ > 0; }

  /// The routes chunks travel by now (one snapshot per operation: a reroute swaps
  /// them): connection_of(tensor, chunk) indexes conns(); replica_connection_of is the
  /// connection an init also takes, to the chunk's replica.
  std::shared_ptr<const runtime::job_routes> routes() const noexcept {
    return std::atomic_load(&routes_);
  }
  /// The ring version pushes are routed by, for their header (0: one node).
  uint32_t ring_stamp() const noexcept {
    return multi_node_
             ? static_cast<uint32_t>(ring_version_.load(std::memory_order_acquire))
             : 0;
  }
  /// Whether connection `conn` leads to a node the job has left (a `reroute` said so,
  /// or, with replicas, the node's connection closed: the job goes on without it).
  bool retired(uint32_t conn) const noexcept {
    return conn < retired_capacity_ && retired_[conn].load(std::memory_order_acquire);
  }
  /// The job's nodes in connection order: `conn_nodes[e]` names connection e's node,
  /// `addresses` each node's HOST:PORT, in that order (before start(); for reconnects).
  void set_nodes(const std::vector<std::string>& conn_nodes,
                 const std::vector<std::string>& addresses);

  /// Whether (tensor, chunk) is homed, or has its replica, on the node of `conn`.
  bool touches(uint32_t tensor, uint32_t chunk, uint32_t conn) const noexcept {
    auto r = routes();
    auto n = r->node_of_connection(conn);
    return r->home_of(tensor, chunk) == n || r->replica_of(tensor, chunk) == n;
  }
  /// Whether (tensor, chunk) is homed, by the current routes, on the node of `conn`.
  bool homed_with(uint32_t tensor, uint32_t chunk, uint32_t conn) const noexcept {
    auto r = routes();
    return r->home_of(tensor, chunk) == r->node_of_connection(conn);
  }
  /// Whether the last ring change moved (tensor, chunk): it travels on another
  /// connection than by the routes before (true if there were none).
  bool moved_by_reroute(uint32_t tensor, uint32_t chunk) const noexcept {
    auto before = std::atomic_load(&routes_before_);
    return !before
           || before->connection_of(tensor, chunk)
                != routes()->connection_of(tensor, chunk);
  }
  using conn_list = std::vector<transports::connection_ptr>;
  /// Every connection so far (a node joining appends its own; none is removed):
  /// connection e of the routes is element e.
  std::shared_ptr<const conn_list> conns() const noexcept {
    return std::atomic_load(&conns_);
  }
  uint32_t job_id() const noexcept { return job_id_; }
  /// Sends a `hyper` frame (payload: HyperChange) on the first connection and waits up
  /// to `timeout` for the node's answer: the clock the job had reached. Throws
  /// rw::error (the node's refusal, a closed link, or errc::timeout).
  uint64_t request_hyper(const std::vector<std::byte>& payload,
                         std::chrono::milliseconds timeout);
  /// A tensor's optimizer state (worker::pull_state, load_state; one call at a time):
  /// one `state` frame per chunk and array (`arrays` 0: the version alone) to the
  /// chunk's home, each answered once; waits for every answer, at most `timeout`. A
  /// read (src null) lands array k of chunk c at dst + k * elements + offset(c) and
  /// returns each chunk's version; a load sends each array from src likewise, then
  /// sets each chunk's version to `clock`. An error frame about the tensor meanwhile
  /// fails the call (rw::error), as do the link's loss and the timeout.
  std::vector<uint64_t> request_state(uint32_t tensor, uint32_t arrays, float* dst,
                                      const float* src, uint64_t clock,
                                      std::chrono::milliseconds timeout);
  uint32_t rank() const noexcept { return rank_; }
  const runtime::chunk_layout& layout(uint32_t tensor) const {
    return shapes_->layout(tensor);
  }
  uint32_t num_tensors() const noexcept { return shapes_->num_tensors(); }

  /// Arms `tensor` for operation `seq`: expect `update` frames at version >=
  /// `version` into `dst` (expect_update), or `ack` frames for clock `version`. With
  /// `changes_only`, an "unchanged" ack for version - 1 also completes a chunk. With
  /// `mirrored` (an init), each chunk that has a replica also waits for the replica's
  /// ack (flag_replica) of it.
  void arm(uint32_t tensor, uint64_t seq, bool expect_update, float* dst,
           uint64_t version, bool changes_only = false, bool mirrored = false);

  /// Sets up a subscription: updates flagged as subscribed go into `dst`, and
  /// `on_version(v)` runs (on the receiver thread) once every chunk reached v.
  void set_subscription(uint32_t tensor, float* dst,
                        std::function<void(uint64_t)> on_version);

  /// The push window (worker/chunk_sender): true if operation `seq` on `tensor`
  /// already has at least `answered` chunks answered, is over, or the link closed;
  /// otherwise false, and link_events::answered(tensor, seq) is called once it has
  /// (never, if the operation ends first: its outcome is told instead). One wait per
  /// tensor: a later call replaces it.
  bool wake_when_answered(uint32_t tensor, uint64_t seq, uint32_t answered);

  /// Whether chunk `chunk` of the armed (or last) operation on `tensor` has its answer
  /// (and its replica's ack, where one is awaited).
  bool chunk_arrived(uint32_t tensor, uint32_t chunk) const;
  /// Whether (tensor, chunk) is served by shard `shard` of the node connection `conn`
  /// leads to (a `resend` frame's question).
  bool served_by(uint32_t tensor, uint32_t chunk, uint32_t conn, uint32_t shard) const {
    auto r = routes();
    return r->served_by(tensor, chunk, r->node_of_connection(conn), shard);
  }

  /// How many chunks the last completed operation on `tensor` received (a pull of
  /// changes counts only the chunks that had changed).
  uint32_t last_changed(uint32_t tensor) const noexcept {
    return answers_.last_changed(tensor);
  }
  /// Closes the connection because of `why` (a timeout); the receiver then reports it.
  void abandon(const std::string& why);

  /// How the job's chunks travel (its spec's compression; before start()): pushes and,
  /// with `updates`, the node's answers as 16-bit values (bf16 / fp16), or top-k pairs.
  void set_compression(const compression_spec& c);
  const compression_spec& compression() const noexcept { return compression_; }
  /// protocol::half_flag of it: the flag of 16-bit pushes (0: float32 or pairs).
  uint16_t half_flag() const noexcept { return half_; }
  /// Data frames on the network (rw::worker::wire_bytes_sent): counted by the proxy as
  /// it sends them, and by the receiver.
  void count_sent(uint64_t bytes) noexcept {
    wire_sent_.fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t wire_bytes_sent() const noexcept {
    return wire_sent_.load(std::memory_order_relaxed);
  }
  uint64_t wire_bytes_received() const noexcept {
    return wire_received_.load(std::memory_order_relaxed);
  }
  /// Where the proxy packs 16-bit chunks as it sends them (its thread only).
  std::vector<std::byte>& pack_buffer() noexcept { return pack_buf_; }

  /// The largest staleness served to the last completed operation on `tensor`.
  uint32_t last_staleness(uint32_t tensor) const noexcept {
    return answers_.last_staleness(tensor);
  }

  // frame_sink (receiver thread)
  transports::payload_target on_header(const transports::connection_ptr& c,
                                       const protocol::frame_header& h) override;
  void on_frame(const transports::connection_ptr& c, const protocol::frame_header& h,
                transports::payload_target& t) override;
  void on_closed(const transports::connection_ptr& c, errc code,
                 const std::string& why) override;

private:
  // A `reroute` frame (`payload`) from connection `conn` (receiver thread).
  void on_reroute(uint32_t conn, const std::vector<std::byte>& payload);
  // Routes by the ring of `msg` (every node of it known): retires the connections of
  // the nodes it leaves out. False (logged) if it cannot.
  bool adopt_ring(const protocol::reroute_msg& msg);
  // The reroute held while the nodes it adds are joined (receiver thread, between two
  // polls); the proxy then re-sends for each connection that sent it and for the new
  // nodes.
  void join_pending();
  // Whether the link has live connections to node `node` (receiver thread).
  bool connected_to(const std::string& node) const;
  // Whether a connection the job still uses is open.
  bool any_open() const;
  // Connection `c` lands nothing more in an operation's buffer (receiver thread).
  void release_landing(const transports::connection_ptr& c);
  // Index of connection `c`, or UINT32_MAX.
  uint32_t index_of(const transports::connection_ptr& c) const;

  // The job's nodes, in connection order (receiver thread only): where each is, its
  // first connection, and, while its connections are lost, since when and why.
  struct node_at {
    std::string name;
    std::string address;
    uint32_t base = 0;
    bool down = false;
    std::chrono::steady_clock::time_point since, next_try;
    std::string why;
  };
  // The node connection `conn` leads to (an index into nodes_), and its connections.
  size_t node_for(uint32_t conn) const;
  std::pair<uint32_t, uint32_t> conn_range(size_t node) const;
  // Connection `conn` closed under a running worker: its node's connections are retired
  // and closed and the node is said hello to again (reconnect_nodes). False if this
  // link cannot (shared memory, no joiner).
  bool begin_reconnect(uint32_t conn, const std::string& why);
  // Between two polls: says hello again to each node that is down and due.
  void reconnect_nodes();
  // A node's loss is final (`why`): with replicas and another node left, its replicas
  // take over (a reroute comes); else the link is lost.
  void give_up(const std::string& node, const std::string& why);
  // Every operation fails with `why` (once).
  void lose(errc code, const std::string& why);

  void run();
  void receive(); // the receiver's loop, until the link is stopped or lost
  void on_completion(const transports::shm::completion& c);
  // A result read in the segment, copied to where the caller wants it (rounded as the
  // network would carry it, with compress_updates).
  void copy_result(float* dst, const float* result, uint32_t length) const;

  std::shared_ptr<transports::endpoint> ep_;
  std::shared_ptr<const conn_list> conns_; // appended to by the receiver (atomic_store)
  uint32_t job_id_;
  uint32_t rank_;
  std::shared_ptr<const runtime::job_routes>
    routes_; // swapped by a reroute (atomic_load)
  std::shared_ptr<const runtime::job_routes>
    routes_before_; // routes_ before the last reroute (atomic_load; null: none yet)
  std::shared_ptr<const runtime::job_routes>
    shapes_; // the first: tensor layouts, never swapped
  std::unique_ptr<transports::shm::worker_channel> shm_;
  std::shared_ptr<transports::endpoint> fabric_; // null unless use_fabric
  transports::connection_ptr companion_;
  answer_slots answers_; // what each tensor's armed operation awaits
  // Per connection (receiver thread): the payload of an error, reroute, hyper or 16-bit
  // update frame, and for an update, where its floats go and the tensor whose
  // operation's buffer that is (answer_slots counts it as landing until it is in).
  struct landing_into {
    float* dst = nullptr;         // a 16-bit update's floats, once widened
    uint32_t tensor = UINT32_MAX; // UINT32_MAX: not landing in an operation's buffer
  };
  transports::receive_scratch<landing_into> landing_;
  // The link was lost (receiver thread): the proxy is told when the receiver has
  // stopped, so nothing lands in a buffer after the calls using it have failed.
  std::optional<std::pair<errc, std::string>> lost_;
  compression_spec compression_;
  uint16_t half_ = 0;
  std::atomic<uint64_t> wire_sent_{0};
  std::atomic<uint64_t> wire_received_{0};
  std::vector<std::byte> pack_buf_; // the proxy's
  // One `hyper` request at a time (request_hyper): its answer, once the receiver has it.
  std::mutex hyper_call_;
  std::mutex hyper_mtx_;
  std::condition_variable hyper_cv_;
  std::optional<std::pair<protocol::frame_header, std::vector<std::byte>>> hyper_answer_;
  // One optimizer-state call at a time (request_state, worker/link_state.cpp): what it
  // awaits, and what came back, once the receiver has it.
  struct state_wait {
    uint32_t tensor = 0;
    uint32_t tag = 0;    // in every frame of the call (`ring`), and in their answers
    uint32_t arrays = 0; // the optimizer's arrays per element
    bool load = false;
    float* dst = nullptr;           // a read: where array k of the tensor goes
    std::vector<uint8_t> got;       // by chunk * slots + slot: answered
    std::vector<uint64_t> versions; // a read: by chunk (UINT64_MAX: none yet)
    size_t left = 0;                // answers still awaited
    std::optional<std::pair<errc, std::string>> error;
    uint32_t slots() const noexcept { return load ? arrays + 1 : std::max(arrays, 1u); }
    // The slot a frame about `array` answers (UINT32_MAX: none of this call's).
    uint32_t slot_of(uint32_t array) const noexcept;
  };
  transports::payload_target on_state_header(const transports::connection_ptr& c,
                                             const protocol::frame_header& h);
  void on_state_frame(const transports::connection_ptr& c,
                      const protocol::frame_header& h);
  // An error frame about the tensor of the call in progress fails it; false if none.
  bool on_state_error(const protocol::frame_header& h, errc code, const std::string& why);
  // Wakes a set_hyper or state call waiting (the link closed).
  void wake_callers();
  // Calls waiting for an answer over TCP (set_hyper, optimizer state): while any does,
  // the receiver of a shared-memory link polls the socket instead of sleeping on the
  // segment (whose bell a TCP answer does not ring: 20 ms per answer before).
  std::atomic<int> control_calls_{0};
  // Counts one such call while it lives, and wakes a receiver asleep on the segment.
  struct control_call {
    explicit control_call(worker_link& l) : link(l) {
      link.control_calls_.fetch_add(1, std::memory_order_acq_rel);
      if (link.shm_)
        link.shm_->wake();
    }
    ~control_call() { link.control_calls_.fetch_sub(1, std::memory_order_acq_rel); }
    control_call(const control_call&) = delete;
    control_call& operator=(const control_call&) = delete;
    worker_link& link;
  };
  std::mutex state_call_;
  std::mutex state_mtx_;
  std::condition_variable state_cv_;
  std::optional<state_wait> state_;
  uint32_t state_tags_ = 0;                            // the last call's tag
  std::shared_ptr<const runtime::routes_basis> basis_; // receiver thread only
  bool multi_node_ = false;                            // basis_ set (before start)
  node_joiner joiner_;
  std::optional<protocol::reroute_msg> pending_; // waiting for its new nodes' joins
  std::vector<uint32_t> pending_conns_;          // the connections that sent it
  std::vector<node_at> nodes_;
  std::vector<std::string> ring_nodes_;   // the nodes of the ring routed by
  bool reconnecting_ = false;             // some node is down
  std::atomic<uint64_t> ring_version_{0}; // the ring routed by (a reroute swaps it)
  uint32_t replicas_ = 0; // the job keeps replicas: a node's loss is not the job's
  // Retires every connection of the node behind connection `conn` (its name in `node`);
  // false if no other connection is left open.
  bool retire_node_of(uint32_t conn, std::string& node);
  std::unique_ptr<std::atomic<bool>[]> retired_; // by connection, up to the capacity
  uint32_t retired_capacity_ = 0;
  std::shared_ptr<link_events> events_;
  std::thread receiver_;
  std::atomic<bool> running_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> abandoned_{false}; // the worker closed its connections itself
  std::mutex reason_mtx_;
  std::string close_reason_;
};

} // namespace rw::actors
