// rw::worker (rackweave/worker.hpp), the public worker API, built on the actors below it:
// it joins the job (job_join), then hands each operation to its worker proxy, whose
// frames the worker link sends and whose answers the link's receiver counts. It lives
// with the actors because it drives them; the header is runtime's public one.
#include "rackweave/worker.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/links/job_join.hpp"
#include "actors/node/idle_policy.hpp"
#include "worker/link.hpp"
#include "worker/proxy.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/trace.hpp"
#include "protocol/control.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw {

struct worker::impl {
  worker_options opts;
  // The step timeline (opts.trace): declared first, so it ends after everything else.
  std::unique_ptr<runtime::trace::session> trace;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<transports::tcp::endpoint> ep;
  std::shared_ptr<actors::worker_link> link;
  actors::worker_proxy_actor proxy;
  protocol::welcome_msg welcome;
  std::unordered_map<std::string, uint32_t> index;
  mutable std::mutex mtx;
  std::vector<uint64_t> clocks;
  bool closed = false;

  uint32_t tensor(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end())
      throw rw::error(
        errc::unknown_tensor,
        fmt::format("tensor '{}' is not part of job '{}'", name, opts.job.name));
    return it->second;
  }

  /// The tensor's elements, or unknown_tensor.
  uint64_t elements(const std::string& name) const {
    return opts.job.tensors[tensor(name)].elements;
  }

  runtime::chunk_layout layout(const std::string& name) const {
    return {elements(name), opts.job.chunk_bytes};
  }

  std::future<void> submit(actors::worker_op op) {
    auto promise = std::make_shared<std::promise<void>>();
    auto fut = promise->get_future();
    op.done = promise;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (closed)
        throw rw::error(errc::closed, "the worker is closed");
      if (op.sets_clock)
        clocks[op.tensor] = op.min_version;
      else if (op.kind == actors::worker_op::push
               || op.kind == actors::worker_op::push_pull)
        ++clocks[op.tensor];
    }
    caf::anon_send(proxy, actors::submit_atom::value, std::move(op));
    return fut;
  }

  /// Rank 0 only: else bad_rank, saying who does `what`.
  void only_rank0(const char* what) const {
    if (opts.rank != 0)
      throw rw::error(errc::bad_rank,
                      fmt::format("only rank 0 {} (this is rank {})", what, opts.rank));
  }

  /// The link, or errc::closed.
  actors::worker_link& live_link() {
    std::lock_guard<std::mutex> guard{mtx};
    if (closed || !link)
      throw rw::error(errc::closed, "the worker is closed");
    return *link;
  }

  /// The tensor's pushes go on from `clock`, after what is queued on it.
  std::future<void> set_clock(uint32_t t, uint64_t clock) {
    actors::worker_op op{actors::worker_op::push, t, nullptr, nullptr, clock, nullptr};
    op.sets_clock = true;
    return submit(std::move(op));
  }

  /// The lowest and highest of the chunks' versions a state call returned.
  static std::pair<uint64_t, uint64_t> span_of(const std::vector<uint64_t>& versions) {
    auto [low, high] = std::minmax_element(versions.begin(), versions.end());
    return {*low, *high};
  }

  void handshake() {
    actors::join_request req;
    req.connect = opts.connect;
    req.job = opts.job;
    req.rank = opts.rank;
    req.token = opts.token;
    req.transport = opts.transport;
    req.rack = opts.rack;
    req.connect_timeout = opts.connect_timeout;
    req.request_timeout = opts.request_timeout;
    req.spec_from_job = opts.spec_from_job;
    auto joined = actors::join_job(*ep, req);
    welcome = joined.welcome;
    if (opts.spec_from_job) { // the job's spec, as the node sent it; stated from now on
      opts.job = welcome.spec;
      req.job = welcome.spec;
      req.spec_from_job = false;
    }
    if (opts.start_clock == 0) // where the node says the rank goes on from
      opts.start_clock = joined.resume_clock;
    link = std::make_shared<actors::worker_link>(
      ep, std::move(joined.conns), welcome.job_id, opts.rank, std::move(joined.routes),
      std::move(joined.shm));
    if (joined.fabric)
      link->use_fabric(std::move(joined.fabric), std::move(joined.companion));
    link->set_compression(opts.job.compression);
    // A node that joins the job later, or whose connections closed under the worker, is
    // said hello to as this one was (a reconnect with a short connect timeout: the
    // receiver waits in it).
    auto joiner = [tcp = ep, req, job_id = welcome.job_id](
                    const std::string& node, const std::string& address,
                    uint64_t ring_version, transports::frame_sink& others) {
      auto again = req;
      if (ring_version == 0)
        again.connect_timeout = std::min(req.connect_timeout,
                                         std::chrono::milliseconds(1000));
      return actors::join_node(*tcp, again, address, node, job_id, ring_version, others);
    };
    link->set_nodes(joined.conn_nodes, joined.node_addresses);
    link->set_basis(std::move(joined.basis), joined.welcome.replicas, joiner);
  }
};

worker::worker(worker_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opts = std::move(options);
  if (d.opts.spec_from_job) {
    if (d.opts.job.name.empty())
      throw rw::error(errc::invalid_spec, "invalid job spec: the job needs a name");
  } else {
    if (auto why = validate(d.opts.job, defaults::max_chunk_bytes, defaults::max_workers);
        !why.empty())
      throw rw::error(errc::invalid_spec, "invalid job spec: " + why);
    if (d.opts.rank >= d.opts.job.num_workers)
      throw rw::error(errc::bad_rank, fmt::format("rank {} is outside 0..{}", d.opts.rank,
                                                  d.opts.job.num_workers - 1));
  }
  if (d.opts.transport != "auto" && d.opts.transport != "tcp" && d.opts.transport != "shm"
      && d.opts.transport != "fabric")
    throw rw::error(errc::invalid_spec,
                    "transport must be auto, tcp, shm or fabric, not '" + d.opts.transport
                      + "'");
  if (!d.opts.trace.empty())
    d.trace = std::make_unique<runtime::trace::session>(
      d.opts.trace, fmt::format("worker rank {} ({})", d.opts.rank, d.opts.job.name));
  // Frames up to the largest chunk any job may have until the spec is known (an fp16
  // chunk carries its scale too: a chunk of one value is 6 bytes).
  d.ep = std::make_shared<transports::tcp::endpoint>(
    d.opts.request_timeout,
    transports::receive_limits{
      (d.opts.spec_from_job ? defaults::max_chunk_bytes : d.opts.job.chunk_bytes)
        + uint32_t{sizeof(float)},
      defaults::max_control_bytes});
  d.handshake();
  for (uint32_t i = 0; i < d.opts.job.tensors.size(); ++i)
    d.index.emplace(d.opts.job.tensors[i].name, i);
  d.clocks.assign(d.opts.job.tensors.size(), d.opts.start_clock);
  d.cfg.set("scheduler.max-threads", 2);
  actors::configure_idle_policy(d.cfg);
  d.cfg.set("logger.verbosity", caf::atom("quiet"));
  d.sys = std::make_unique<caf::actor_system>(d.cfg);
  d.proxy = actors::spawn_worker_proxy(*d.sys, d.link, d.opts.request_timeout,
                                       d.opts.start_clock, d.opts.push_window_bytes,
                                       runtime::is_layerwise(d.opts.job.optimizer.kind));
  d.link->start(actors::events_of(d.proxy));
}

worker::~worker() {
  close();
}

void worker::close() {
  auto& d = *impl_;
  {
    std::lock_guard<std::mutex> guard{d.mtx};
    if (d.closed)
      return;
    d.closed = true;
  }
  {
    caf::scoped_actor self{*d.sys};
    // The bye goes out after every frame already queued for sending.
    self->request(d.proxy, std::chrono::seconds(10), actors::bye_atom::value)
      .receive([](actors::ok_atom) {}, [](caf::error&) {});
  }
  d.link->stop("the worker was closed");
  caf::anon_send_exit(d.proxy, caf::exit_reason::user_shutdown);
  d.proxy = nullptr;
  d.sys.reset(); // waits for the proxy
  d.link.reset();
}

const job_spec& worker::spec() const noexcept {
  return impl_->opts.job;
}

uint32_t worker::rank() const noexcept {
  return impl_->opts.rank;
}

bool worker::created_job() const noexcept {
  return impl_->welcome.created;
}

uint32_t worker::job_id() const noexcept {
  return impl_->welcome.job_id;
}

std::future<void> worker::init(const std::string& tensor, const float* values) {
  auto t = impl_->tensor(tensor);
  if (impl_->opts.rank != 0 || !impl_->opts.job.tensors[t].has_init)
    throw rw::error(impl_->opts.rank != 0 ? errc::bad_rank : errc::invalid_spec,
                    fmt::format("init of '{}': only rank 0 initialises, and only tensors "
                                "declared with has_init",
                                tensor));
  return impl_->submit({actors::worker_op::init, t, values, nullptr, 0, nullptr});
}

std::future<void> worker::push(const std::string& tensor, const float* grad) {
  return impl_->submit(
    {actors::worker_op::push, impl_->tensor(tensor), grad, nullptr, 0, nullptr});
}

std::future<void> worker::pull(const std::string& tensor, float* out,
                               uint64_t min_version) {
  return impl_->submit(
    {actors::worker_op::pull, impl_->tensor(tensor), nullptr, out, min_version, nullptr});
}

std::future<void> worker::push_pull(const std::string& tensor, const float* grad,
                                    float* out) {
  if (out == nullptr && shared_result(tensor) == nullptr)
    throw rw::error(errc::invalid_spec, "push_pull without an output buffer needs shared "
                                        "memory (read the result at shared_result())");
  return impl_->submit(
    {actors::worker_op::push_pull, impl_->tensor(tensor), grad, out, 0, nullptr});
}

namespace {

// A sparse push or push_pull of `count` pairs on tensor t, checked before anything is
// sent (an index out of range throws).
actors::worker_op sparse_op(const job_spec& spec, actors::worker_op::kind_t kind,
                            uint32_t t, const uint64_t* indices, const float* values,
                            size_t count, float* out) {
  if (count > 0 && (indices == nullptr || values == nullptr))
    throw rw::error(errc::invalid_spec, "a sparse push needs indices and values");
  auto elements = spec.tensors[t].elements;
  for (size_t i = 0; i < count; ++i)
    if (indices[i] >= elements)
      throw rw::error(errc::bad_chunk,
                      fmt::format("sparse index {} is out of range for tensor '{}' ({} "
                                  "elements); nothing was sent",
                                  indices[i], spec.tensors[t].name, elements));
  actors::worker_op op{kind, t, nullptr, out, 0, nullptr};
  op.sparse = true;
  op.indices = indices;
  op.values = values;
  op.count = count;
  return op;
}

} // namespace

std::future<void> worker::push_sparse(const std::string& tensor, const uint64_t* indices,
                                      const float* values, size_t count) {
  return impl_->submit(sparse_op(impl_->opts.job, actors::worker_op::push,
                                 impl_->tensor(tensor), indices, values, count, nullptr));
}

std::future<void> worker::push_pull_sparse(const std::string& tensor,
                                           const uint64_t* indices, const float* values,
                                           size_t count, float* out) {
  if (out == nullptr && shared_result(tensor) == nullptr)
    throw rw::error(errc::invalid_spec,
                    "push_pull_sparse needs an output buffer over TCP");
  return impl_->submit(sparse_op(impl_->opts.job, actors::worker_op::push_pull,
                                 impl_->tensor(tensor), indices, values, count, out));
}

std::future<void> worker::pull_changed(const std::string& tensor, float* out,
                                       uint64_t since) {
  actors::worker_op op{
    actors::worker_op::pull, impl_->tensor(tensor), nullptr, out, since, nullptr};
  op.only_changed = true;
  return impl_->submit(std::move(op));
}

std::future<void> worker::subscribe(const std::string& tensor, float* out,
                                    std::function<void(uint64_t)> on_version) {
  auto t = impl_->tensor(tensor);
  if (out == nullptr)
    throw rw::error(errc::invalid_spec, "subscribe needs a buffer for the updates");
  if (!impl_->link)
    throw rw::error(errc::closed, "the worker is closed");
  impl_->link->set_subscription(t, out, std::move(on_version));
  actors::worker_op op{actors::worker_op::pull, t, nullptr, out, 0, nullptr};
  op.subscribe = true;
  return impl_->submit(std::move(op));
}

bool worker::chunk_ready(const std::string& tensor, uint32_t chunk) const {
  auto t = impl_->tensor(tensor);
  return impl_->link && impl_->link->chunk_arrived(t, chunk);
}

uint32_t worker::chunk_count(const std::string& tensor) const {
  return impl_->layout(tensor).count();
}

uint64_t worker::chunk_offset(const std::string& tensor, uint32_t chunk) const {
  return impl_->layout(tensor).offset(chunk);
}

uint32_t worker::chunk_length(const std::string& tensor, uint32_t chunk) const {
  auto l = impl_->layout(tensor);
  return chunk < l.count() ? l.length(chunk) : 0;
}

uint32_t worker::last_changed(const std::string& tensor) const {
  auto t = impl_->tensor(tensor);
  return impl_->link ? impl_->link->last_changed(t) : 0;
}

uint32_t worker::last_staleness(const std::string& tensor) const {
  auto t = impl_->tensor(tensor);
  return impl_->link ? impl_->link->last_staleness(t) : 0;
}

const char* worker::transport() const noexcept {
  if (impl_->link && impl_->link->shm())
    return "shm";
  return impl_->link && impl_->link->companion() ? "fabric" : "tcp";
}

uint64_t worker::wire_bytes_sent() const noexcept {
  return impl_->link ? impl_->link->wire_bytes_sent() : 0;
}

std::shared_ptr<void> worker::register_buffer(const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0)
    throw rw::error(errc::bad_buffer, "register_buffer: no memory to register");
  return impl_->live_link().pin(data, bytes);
}

uint64_t worker::fabric_registrations() const noexcept {
  if (!impl_->link)
    return 0;
  auto [sends, results] = impl_->link->fabric_registrations();
  return sends + results;
}

uint64_t worker::wire_bytes_received() const noexcept {
  return impl_->link ? impl_->link->wire_bytes_received() : 0;
}

float* worker::shared_gradient(const std::string& tensor) const {
  auto t = impl_->tensor(tensor);
  auto* shm = impl_->link ? impl_->link->shm() : nullptr;
  return shm != nullptr ? shm->gradient(t) : nullptr;
}

const float* worker::shared_result(const std::string& tensor) const {
  auto t = impl_->tensor(tensor);
  auto* shm = impl_->link ? impl_->link->shm() : nullptr;
  return shm != nullptr ? shm->result(t) : nullptr;
}

uint64_t worker::clock(const std::string& tensor) const {
  auto t = impl_->tensor(tensor);
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->clocks[t];
}

// --- the size-checked calls --------------------------------------------------------

namespace {

template <class T>
void check_length(const view<T>& v, uint64_t elements, const std::string& tensor,
                  const char* what, const char* against = "the tensor") {
  if (v.size() != elements)
    throw rw::error(errc::bad_buffer,
                    fmt::format("tensor '{}': {} elements in the {}, {} in {}", tensor,
                                v.size(), what, elements, against));
}

} // namespace

std::future<void> worker::init(const std::string& tensor, const_floats values) {
  check_length(values, impl_->elements(tensor), tensor, "initial values");
  return init(tensor, values.data());
}

std::future<void> worker::push(const std::string& tensor, const_floats grad) {
  check_length(grad, impl_->elements(tensor), tensor, "gradient");
  return push(tensor, grad.data());
}

std::future<void> worker::pull(const std::string& tensor, floats out,
                               uint64_t min_version) {
  check_length(out, impl_->elements(tensor), tensor, "output");
  return pull(tensor, out.data(), min_version);
}

std::future<void> worker::push_pull(const std::string& tensor, const_floats grad,
                                    floats out) {
  auto n = impl_->elements(tensor);
  check_length(grad, n, tensor, "gradient");
  check_length(out, n, tensor, "output");
  return push_pull(tensor, grad.data(), out.data());
}

std::future<void> worker::push_sparse(const std::string& tensor, const_indices indices,
                                      const_floats values) {
  check_length(values, indices.size(), tensor, "sparse values", "the indices");
  return push_sparse(tensor, indices.data(), values.data(), indices.size());
}

std::future<void> worker::push_pull_sparse(const std::string& tensor,
                                           const_indices indices, const_floats values,
                                           floats out) {
  check_length(out, impl_->elements(tensor), tensor, "output");
  check_length(values, indices.size(), tensor, "sparse values", "the indices");
  return push_pull_sparse(tensor, indices.data(), values.data(), indices.size(),
                          out.data());
}

std::future<void> worker::pull_changed(const std::string& tensor, floats out,
                                       uint64_t since) {
  check_length(out, impl_->elements(tensor), tensor, "output");
  return pull_changed(tensor, out.data(), since);
}

std::future<void> worker::subscribe(const std::string& tensor, floats out,
                                    std::function<void(uint64_t version)> on_version) {
  check_length(out, impl_->elements(tensor), tensor, "output");
  return subscribe(tensor, out.data(), std::move(on_version));
}

uint64_t worker::set_hyper(const hyper_change& change) {
  auto& d = *impl_;
  d.only_rank0("changes the job's hyper-parameters");
  if (auto why = validate(change); !why.empty())
    throw rw::error(errc::invalid_spec, "set_hyper: " + why);
  {
    std::lock_guard<std::mutex> guard{d.mtx};
    if (d.closed)
      throw rw::error(errc::closed, "the worker is closed");
  }
  auto payload = protocol::encode(change);
  return d.link->request_hyper(payload, d.opts.request_timeout);
}

// --- the optimizer state -------------------------------------------------------------

namespace {

// A saved state's buffer holds the optimizer's arrays of the tensor, one after another.
template <class T>
void check_state_length(const view<T>& v, uint32_t arrays, uint64_t elements,
                        const std::string& tensor, const char* what) {
  const auto against = fmt::format("{} arrays of the tensor's", arrays);
  check_length(v, uint64_t{arrays} * elements, tensor, what, against.c_str());
}

} // namespace

uint32_t worker::state_arrays() const noexcept {
  return runtime::kept_state_arrays(impl_->opts.job.optimizer.kind);
}

uint64_t worker::pull_state(const std::string& tensor, floats out) {
  auto& d = *impl_;
  auto t = d.tensor(tensor);
  check_state_length(out, state_arrays(), d.elements(tensor), tensor,
                     "optimizer state buffer");
  auto [low, high] = impl::span_of(d.live_link().request_state(
    t, state_arrays(), out.data(), nullptr, 0, d.opts.request_timeout));
  if (low != high)
    throw rw::error(errc::clock_out_of_range,
                    fmt::format("the optimizer state of '{}' was read with its chunks at "
                                "versions {} to {}: read it once every push of this "
                                "worker was answered (a BSP job's chunks then stand at "
                                "one version)",
                                tensor, low, high));
  return low;
}

void worker::load_state(const std::string& tensor, const_floats state, uint64_t clock) {
  auto& d = *impl_;
  auto t = d.tensor(tensor);
  d.only_rank0("loads the optimizer state; the other ranks call go_on_from");
  check_state_length(state, state_arrays(), d.elements(tensor), tensor,
                     "optimizer state");
  // A job without arrays still loads its clock; the source then only says "a load".
  static const float none = 0.0f;
  d.live_link().request_state(t, state_arrays(), nullptr,
                              state.size() > 0 ? state.data() : &none, clock,
                              d.opts.request_timeout);
  d.set_clock(t, clock).get();
}

void worker::go_on_from(const std::string& tensor, uint64_t clock) {
  auto& d = *impl_;
  auto t = d.tensor(tensor);
  const auto deadline = std::chrono::steady_clock::now() + d.opts.request_timeout;
  for (auto pause = std::chrono::milliseconds(2);;
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    auto [low, high] = impl::span_of(
      d.live_link().request_state(t, 0, nullptr, nullptr, 0, d.opts.request_timeout));
    if (high > clock)
      throw rw::error(errc::clock_out_of_range,
                      fmt::format("tensor '{}' is at version {} already, past clock {}: "
                                  "the job went on without this worker",
                                  tensor, high, clock));
    if (low == clock)
      break;
    if (std::chrono::steady_clock::now() + pause > deadline)
      throw rw::error(errc::timeout,
                      fmt::format("tensor '{}' did not reach clock {} within {} ms (at "
                                  "version {}): has rank 0 loaded the optimizer state?",
                                  tensor, clock, d.opts.request_timeout.count(), low));
    std::this_thread::sleep_for(pause);
  }
  d.set_clock(t, clock).get();
}

} // namespace rw
