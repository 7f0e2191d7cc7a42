#pragma once
// The worker API: embed a RackWeave worker in a training loop.
//
//   rw::worker_options opts;
//   opts.connect = "127.0.0.1:7700";
//   opts.rank = rank;
//   opts.job = {"my-job", /*num_workers*/ 4, rw::defaults::chunk_bytes,
//               {rw::optimizer_kind::adam, /*lr*/ 1e-3f}, {{"w1", 1 << 20}, {"b1", 256}}};
//   opts.token = token;                       // from rw.job_create{...} in rw-shell
//   rw::worker w{opts};                       // connects, joins (or creates) the job
//   w.push_pull("w1", grad, params).get();    // new parameters in `params` (std::vector)
//
// Every call returns a future that completes when the node has answered, or throws
// rw::error (errc.hpp) when the node refused the request, the job failed, the
// connection dropped or no answer came within the request timeout. Misuse throws at
// once instead, from the call itself: an undeclared tensor name (unknown_tensor), init
// from a rank other than 0 (bad_rank) or of a tensor without has_init (invalid_spec),
// any call after close() (closed).
//
// Buffers are rw::view<T>s: a pointer with its length in elements, made from any
// contiguous container (std::vector, std::array) or from (pointer, count). A length
// other than the tensor's throws rw::error(errc::bad_buffer) at the call, naming both;
// nothing is sent. The raw-pointer overloads remain for callers that checked already:
// they read and write the tensor's length and cannot tell a short buffer.
//
// Buffers passed to a call are used in place (no copies) and must stay alive until its
// own future completes, even when another call's future failed: calls in flight on
// other tensors go on using theirs. Calls on one tensor run in the order they were
// made (so init, then pull into the same buffer, is safe); calls on different tensors
// overlap. A non-zero rank's pull of version 0 of a has_init tensor waits for rank 0's
// init, up to the request timeout.

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "rackweave/defaults.hpp"
#include "rackweave/errc.hpp"
#include "rackweave/job_spec.hpp"

namespace rw {

/// A buffer of `size()` elements at `data()`, for the size-checked calls.
template <class T>
class view {
public:
  view(T* data, size_t size) noexcept : data_(data), size_(size) {}
  /// Any contiguous container whose data() converts to T* (a const one only to a
  /// view of const T).
  template <class C, class P = decltype(std::declval<C&>().data()),
            class = std::enable_if_t<std::is_convertible_v<P, T*>>,
            class = decltype(std::declval<C&>().size())>
  view(C& container) noexcept : data_(container.data()), size_(container.size()) {}
  T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

private:
  T* data_;
  size_t size_;
};

using floats = view<float>;
using const_floats = view<const float>;
using const_indices = view<const uint64_t>;

struct worker_options {
  /// HOST:PORT of a node: the job's, or any node of the cluster (also a coordinator's
  /// --listen). A node that is not this worker's answers `moved` and the worker follows
  /// it (a hierarchical job's worker ends at its rack's agg).
  std::string connect = defaults::listen;
  /// The worker's rack ("": not said). In a hierarchical job placed at join (created
  /// without worker_racks) the worker is placed at that rack's agg unless a node of the
  /// job shares its host; with worker_racks it must agree with its rank's rack. A name
  /// that is no rack of the job is refused at join (errc::invalid_spec).
  std::string rack;
  /// The job to join. Its name, workers, chunk size, optimizer and consistency must
  /// match what the job was created with; the first worker to join declares the
  /// tensors (and, on a node with --open-jobs, may create a job that was never
  /// created), later ones must match. With spec_from_job only the name (and, if this
  /// worker declares them, the tensors) is read.
  job_spec job;
  /// Join with the job's name (and token) alone: the node sends the rest of the spec
  /// (workers, chunk size, optimizer, consistency, tensors), which spec() then returns.
  /// Tensors given in `job.tensors` declare them for a job nobody has declared them for
  /// yet, or must match. The job must exist: created through the cluster (rw.job_create)
  /// or already running on the node. Chunks travel over TCP (transport auto or tcp; shm
  /// is refused: its segment is sized from the tensors before the hello).
  bool spec_from_job = false;
  /// This worker's rank in 0..job.num_workers-1; gradients are summed in rank order.
  uint32_t rank = 0;
  /// The job's token, as creating the job returned it (rw-shell: rw.job_create). The
  /// worker proves it holds it (challenge-response) and never sends it. Empty: join a
  /// job without credentials, which only a node started with --open-jobs allows.
  std::string token;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{defaults::request_timeout_ms};
  /// How chunks travel: "auto" (shared memory when the node is on this host and allows
  /// it; else libfabric RMA when the node runs --fabric and this host has its provider;
  /// else TCP), "tcp", "shm" (shared memory or fail) or "fabric" (libfabric or fail).
  /// Shared memory and fabric serve one-node and hierarchical jobs; a job on several
  /// flat nodes travels over TCP.
  std::string transport = "auto";
  /// The clock this worker's first push carries. 0: where the node says this rank goes
  /// on from, which clock(tensor) then returns: 0 for a new job; a job restored from a
  /// checkpoint, the checkpoint's clock; a rank that joins again (a restarted process,
  /// same rank, while the job lives), the first step it had not pushed everywhere.
  /// Pull that version first and go on from there: pushes the node has counted already
  /// are dropped as duplicates (and answered as the first were), so nothing counts twice.
  uint64_t start_clock = 0;
  /// Push window over TCP (push_pull): chunk c is sent once the chunks up to c minus
  /// this many bytes' worth are answered, so no worker runs far ahead of the others on
  /// shared links. 0: no window. The default (defaults::push_window_auto): 16 of the
  /// job's chunks, at least 512 KiB. Four times this where the job has replicas (answers
  /// wait for a node-to-node round trip more). Not applied to layer-wise optimizers
  /// (LAMB, LARS), whose answers wait for the whole tensor, nor over shared memory.
  uint64_t push_window_bytes = defaults::push_window_bytes;
  /// A step timeline of this worker: Chrome trace-event JSON written to this file while
  /// the worker lives (open it in ui.perfetto.dev or chrome://tracing, beside the node's
  /// `rw-node --trace` file: both are in CLOCK_MONOTONIC time). One event per operation
  /// (init, push, pull, push_pull: from the call's start on the wire to its answer,
  /// with its tensor index and clock). "": none. A file that cannot be written throws
  /// rw::error(errc::io_error) from the constructor; one process writes one trace file
  /// (a second worker naming the same file shares it, another file throws invalid_spec).
  std::string trace;
};

class worker {
public:
  /// Connects and joins the job. Throws rw::error (refused, unreachable, timed out).
  explicit worker(worker_options options);
  /// Leaves the job gracefully (bye) if still connected; pending calls fail.
  ~worker();

  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  /// The job's spec (with spec_from_job: as the node sent it).
  const job_spec& spec() const noexcept;
  uint32_t rank() const noexcept;
  /// Whether this worker's hello created the job: an open job (a node with
  /// --open-jobs) made by this hello. False for a job created through the coordinator
  /// (rw.job_create), even for its first worker.
  bool created_job() const noexcept;
  /// The job id the node assigned.
  uint32_t job_id() const noexcept;

  /// Rank 0 only, for tensors declared with has_init: the values of version 0.
  std::future<void> init(const std::string& tensor, const float* values);

  /// Adds `grad` to the tensor's next clock; completes when the node counted it.
  std::future<void> push(const std::string& tensor, const float* grad);

  /// Fills `out` with the tensor at version >= min_version (version v = after v
  /// updates; 0 is the initial value).
  std::future<void> pull(const std::string& tensor, float* out, uint64_t min_version);

  /// push, then the updated tensor into `out`: each chunk arrives as soon as the node
  /// has summed every worker's gradient for it and run the optimizer. Over shared
  /// memory `out` may be null: the new values are then read at shared_result().
  std::future<void> push_pull(const std::string& tensor, const float* grad, float* out);

  /// A sparse push: values[i] is added at element indices[i] (repeated indices add up;
  /// every other element counts as zero), as push does with a dense gradient. Only the
  /// pairs travel (per chunk, or the chunk dense where that is smaller). Dense and
  /// sparse pushes to one tensor combine exactly. An index out of range throws at
  /// once and nothing is sent. indices and values must live until the future is done.
  std::future<void> push_sparse(const std::string& tensor, const uint64_t* indices,
                                const float* values, size_t count);

  /// push_sparse, then the updated tensor into `out`, as push_pull.
  std::future<void> push_pull_sparse(const std::string& tensor, const uint64_t* indices,
                                     const float* values, size_t count, float* out);

  /// Fills in `out` only the chunks whose version is newer than `since` (a version this
  /// worker has seen); the rest of `out` is left as it is. last_changed() then says how
  /// many chunks changed. A `since` newer than the tensor fails (clock_out_of_range).
  std::future<void> pull_changed(const std::string& tensor, float* out, uint64_t since);

  /// Chunks the last completed pull / push_pull on `tensor` received (for
  /// pull_changed: the chunks that had changed).
  uint32_t last_changed(const std::string& tensor) const;

  /// Eager notification without asking: from now on every new version of `tensor` is
  /// written into `out` chunk by chunk as the node produces it (the current version
  /// first), and on_version(v) is called once every chunk has reached version v. It
  /// runs on the worker's receiver thread: keep it short (signal, do not compute).
  /// `out` must outlive the worker; its values change under you between calls.
  std::future<void> subscribe(const std::string& tensor, float* out,
                              std::function<void(uint64_t version)> on_version);

  /// Per-chunk readiness of the tensor's current (or last) call: whether chunk `chunk`
  /// has its answer, so a loop can use the first chunks while later ones are summed.
  bool chunk_ready(const std::string& tensor, uint32_t chunk) const;
  /// The tensor's chunks: how many, and which elements each holds.
  uint32_t chunk_count(const std::string& tensor) const;
  uint64_t chunk_offset(const std::string& tensor, uint32_t chunk) const;
  uint32_t chunk_length(const std::string& tensor, uint32_t chunk) const;

  /// How many pushes this worker has made to `tensor` (its clock).
  uint64_t clock(const std::string& tensor) const;

  /// The largest staleness the last completed push_pull or pull on `tensor` was
  /// served: how many clocks the slowest worker's pushes included in the answer were
  /// behind this worker's (always 0 under BSP; at most s under SSP(s)).
  uint32_t last_staleness(const std::string& tensor) const;

  /// "shm", "fabric" or "tcp": how this worker's chunks travel.
  const char* transport() const noexcept;

  /// Bytes of this worker's data frames on the network so far: the 64-byte headers and
  /// the payloads of the pushes, pulls and inits it sent, and of the updates and acks it
  /// received (over shared memory, where chunks do not travel, only those of frames
  /// that did). What a job's compression saves shows here.
  uint64_t wire_bytes_sent() const noexcept;
  uint64_t wire_bytes_received() const noexcept;

  /// Where chunks travel over libfabric: registers [data, data + bytes) with the NIC
  /// now, for as long as the returned handle lives, so gradients sent from there and
  /// results landing there (an `out` of push_pull) need no registration on the way:
  /// for buffers made once and used every step (rackweave.torch's pinned staging
  /// buffers). Keep the memory alive while the handle is. Null over TCP or shared
  /// memory (nothing to register). Throws rw::error(errc::io_error) naming the
  /// locked-memory limit where the provider refuses.
  std::shared_ptr<void> register_buffer(const void* data, size_t bytes);
  /// Registrations this worker's fabric endpoint made, for sends and for placed
  /// results together (0 over TCP or shared memory): a steady state makes none.
  uint64_t fabric_registrations() const noexcept;

  /// With shared memory: compute the gradient in shared_gradient(), call push_pull
  /// with a null `out`, and read the new values at shared_result() (the node's own
  /// parameters, mapped read-only): no byte is copied on either side. The values there
  /// stay put until this worker pushes the tensor again. Over TCP both are null.
  float* shared_gradient(const std::string& tensor) const;
  const float* shared_result(const std::string& tensor) const;

  /// The size-checked calls: as above, each buffer's length checked against the
  /// tensor's elements (sparse: indices and values of equal length) at the call.
  std::future<void> init(const std::string& tensor, const_floats values);
  std::future<void> push(const std::string& tensor, const_floats grad);
  std::future<void> pull(const std::string& tensor, floats out, uint64_t min_version);
  std::future<void> push_pull(const std::string& tensor, const_floats grad, floats out);
  std::future<void> push_sparse(const std::string& tensor, const_indices indices,
                                const_floats values);
  std::future<void> push_pull_sparse(const std::string& tensor, const_indices indices,
                                     const_floats values, floats out);
  std::future<void> pull_changed(const std::string& tensor, floats out, uint64_t since);
  std::future<void> subscribe(const std::string& tensor, floats out,
                              std::function<void(uint64_t version)> on_version);

  /// Rank 0 only: the job's optimizer hyper-parameters (those `change` gives) for the
  /// step of clock change.at_clock and every later one, for every chunk on every node
  /// (as rw.job_set; a job of the cluster goes through its coordinator). Blocks until
  /// the node answers (at most the request timeout); returns the highest clock the job
  /// had reached. Call it before pushing clock at_clock: a change for a step some chunk
  /// has run is refused (clock_out_of_range) and nothing changes. BSP jobs only; not
  /// LAMB/LARS or hierarchical jobs (invalid_spec).
  uint64_t set_hyper(const hyper_change& change);

  /// Saving and resuming the optimizer state the node holds (the state frames of
  /// docs/wire-protocol.md). BSP jobs only, not a hierarchical job (invalid_spec); each
  /// call blocks, at most the request timeout, and is made between operations on the
  /// tensor (an error about the tensor that comes meanwhile is taken as the call's).
  ///
  /// How many arrays the node keeps per element of every tensor, which a saved state
  /// holds: 0 (sgd, sum), 1 (momentum, nesterov, lars: the momentum) or 2 (adam, lamb:
  /// the first moment m, then the second moment v).
  uint32_t state_arrays() const noexcept;

  /// The tensor's optimizer state into `out` (state_arrays() times its elements: array
  /// k of element i at out[k * elements + i]); returns its clock (the steps applied).
  /// Read it once every push this worker made was answered: the tensor's chunks then
  /// stand at one version. One caught between two versions (another rank's step ran
  /// in between; SSP) or halfway through a step is refused (clock_out_of_range).
  uint64_t pull_state(const std::string& tensor, floats out);

  /// Rank 0 (else bad_rank), resuming: `state` (as pull_state gave it) becomes the
  /// tensor's optimizer state and `clock` its version, from which its steps count on
  /// (Adam's bias correction included), then this worker goes on from `clock` as
  /// go_on_from does. Saved with its parameters at clock c, a job resumed this way
  /// computes bitwise what the saved one computed from c on. The job's chunks of the
  /// tensor must stand at version 0 (no step yet, rank 0's init done) or already at
  /// `clock`, between steps (else clock_out_of_range, nothing loaded into that chunk);
  /// a job with replicas is refused (invalid_spec). Its parameters are not touched:
  /// init them as saved.
  void load_state(const std::string& tensor, const_floats state, uint64_t clock);

  /// Every other rank, after rank 0's load_state: waits until the node's chunks of
  /// `tensor` stand at `clock` (rank 0's load is in), then this worker goes on as if it
  /// had pushed the tensor `clock` times (clock() says so; its next push is for the
  /// step to version clock + 1). A worker that joins after the load goes on from there
  /// anyway (its welcome says where). Throws errc::timeout if the load does not come
  /// within the request timeout, clock_out_of_range if the tensor is past `clock`.
  void go_on_from(const std::string& tensor, uint64_t clock);

  /// Leaves the job (bye) and disconnects; calls afterwards throw. Idempotent.
  void close();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace rw
