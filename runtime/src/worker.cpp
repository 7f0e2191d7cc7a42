#include "rackweave/worker.hpp"

#include <mutex>
#include <unordered_map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/worker_link.hpp"
#include "actors/worker_proxy.hpp"
#include "runtime/credentials.hpp"
#include "runtime/ring.hpp"
#include "transports/control.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw {

namespace {

using transports::frame_header;
using transports::frame_kind;
using transports::payload_target;

// Receives the node's answer to the hello: a welcome or an error; or first a
// challenge, answered with a proof of the token.
class handshake_sink final : public transports::frame_sink {
public:
  /// With `want_challenge` (a hello with a token), a welcome that no challenge came
  /// before is refused: the node did not check the token, so this is not that job.
  handshake_sink(const std::string& token, const std::string& job, uint32_t rank,
                 bool want_challenge)
    : token_(token), job_(job), rank_(rank), want_challenge_(want_challenge) {
  }

  payload_target on_header(const transports::connection_ptr&,
                           const frame_header& h) override {
    if (h.kind != frame_kind::welcome && h.kind != frame_kind::error
        && h.kind != frame_kind::challenge)
      return payload_target::dropped();
    buf.resize(h.payload_bytes);
    return payload_target::into(buf.data());
  }
  void on_frame(const transports::connection_ptr& c, const frame_header& h,
                payload_target& t) override {
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
             "the node admitted this worker to job '" + job_ + "' without checking its "
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
    transports::error_msg err;
    if (decode(buf.data(), buf.size(), err, why) != errc::ok)
      err = {errc::bad_frame, "undecodable error frame: " + why};
    fail(err.code, err.message);
  }
  void on_closed(const transports::connection_ptr&, errc code,
                 const std::string& why) override {
    if (!answered)
      fail(errc::io_error, "the node closed the connection during the hello: " + why);
  }

  // Proves the token: HMAC over the node's nonce (runtime/credentials).
  void answer(const transports::connection_ptr& c, const frame_header& h, std::string& why) {
    transports::challenge_msg ch;
    if (decode(buf.data(), buf.size(), ch, why) != errc::ok) {
      fail(errc::bad_frame, "undecodable challenge: " + why);
      return;
    }
    if (token_.empty()) {
      fail(errc::unauthorized, "the node asks for the token of job '" + job_
                                 + "' and this worker has none");
      return;
    }
    auto payload = transports::encode(
      transports::proof_msg{runtime::prove(token_, ch.nonce, job_, rank_)});
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
  transports::welcome_msg welcome;

private:
  const std::string& token_;
  const std::string& job_;
  uint32_t rank_;
  bool want_challenge_;
  bool challenged_ = false;
};

} // namespace

struct worker::impl {
  worker_options opts;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<transports::tcp::endpoint> ep;
  std::shared_ptr<actors::worker_link> link;
  actors::worker_proxy_actor proxy;
  transports::welcome_msg welcome;
  std::unordered_map<std::string, uint32_t> index;
  mutable std::mutex mtx;
  std::vector<uint64_t> clocks;
  bool closed = false;

  uint32_t tensor(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end())
      throw rw::error(errc::unknown_tensor,
                      fmt::format("tensor '{}' is not part of job '{}'", name,
                                  opts.job.name));
    return it->second;
  }

  runtime::chunk_layout layout(const std::string& name) const {
    return {opts.job.tensors[tensor(name)].elements, opts.job.chunk_bytes};
  }

  std::future<void> submit(actors::worker_op op) {
    auto promise = std::make_shared<std::promise<void>>();
    auto fut = promise->get_future();
    op.done = promise;
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (closed)
        throw rw::error(errc::closed, "the worker is closed");
      if (op.kind == actors::worker_op::push || op.kind == actors::worker_op::push_pull)
        ++clocks[op.tensor];
    }
    caf::anon_send(proxy, actors::submit_atom::value, std::move(op));
    return fut;
  }

  // Waits for the node's welcome (or error) on the endpoint's connections.
  transports::welcome_msg await_welcome(const std::string& what, bool want_challenge = false) {
    handshake_sink sink{opts.token, opts.job.name, opts.rank, want_challenge};
    auto deadline = std::chrono::steady_clock::now() + opts.request_timeout;
    while (!sink.answered && std::chrono::steady_clock::now() < deadline)
      ep->poll(50, sink);
    if (!sink.answered)
      throw rw::error(errc::timeout, fmt::format("no answer to {} within {} ms", what,
                                                 opts.request_timeout.count()));
    if (!sink.ok)
      throw rw::error(sink.code, sink.message);
    return sink.welcome;
  }

  transports::connection_ptr connect(const std::string& address) {
    try {
      return ep->connect(transports::tcp::parse_address(address), opts.connect_timeout);
    } catch (const std::exception& e) {
      throw rw::error(errc::io_error, e.what());
    }
  }

  // Says hello on `c` (to `address`) and waits for the welcome, proving the token
  // if the node asks.
  transports::welcome_msg say_hello(const transports::connection_ptr& c,
                                    const std::string& address,
                                    const transports::hello_msg& hello) {
    auto payload = transports::encode(hello);
    if (payload.size() > defaults::max_control_bytes)
      throw rw::error(errc::invalid_spec, "the job spec is too large to send");
    frame_header h;
    h.kind = frame_kind::hello;
    h.rank = opts.rank;
    h.payload_bytes = static_cast<uint32_t>(payload.size());
    iovec iov{payload.data(), payload.size()};
    if (!c->send(h, &iov, 1))
      throw rw::error(errc::io_error, "cannot send hello to " + address);
    return await_welcome("hello from " + address, !opts.token.empty());
  }

  // `address` with a wildcard host replaced by the host `via` reached.
  static std::string reachable(const std::string& address, const std::string& via) {
    auto addr = transports::tcp::parse_address(address);
    if (transports::tcp::is_wildcard(addr.host))
      addr.host = transports::tcp::parse_address(via).host;
    return addr.to_string();
  }

  // One connection per endpoint of the node that sent `w` on `first` (reached at
  // `address`): attaches to the others with the welcome's token.
  std::vector<transports::connection_ptr> attach_all(const transports::welcome_msg& w,
                                                     transports::connection_ptr first,
                                                     const std::string& address) {
    std::vector<transports::connection_ptr> conns(w.endpoints.size());
    conns[w.endpoint_index] = std::move(first);
    for (uint32_t i = 0; i < conns.size(); ++i) {
      if (conns[i])
        continue;
      auto addr = reachable(w.endpoints[i], address);
      conns[i] = connect(addr);
      frame_header a;
      a.kind = frame_kind::attach;
      a.job_id = w.job_id;
      a.rank = opts.rank;
      a.clock = w.token;
      if (!conns[i]->send(a))
        throw rw::error(errc::io_error, "cannot attach to " + addr);
      await_welcome("attach to " + addr);
    }
    return conns;
  }

  // A job on several nodes: joins every other node of the job too, and routes each
  // chunk to its home (runtime/ring).
  void join_nodes(transports::connection_ptr first, transports::hello_msg hello) {
    auto& names = welcome.job_node_names;
    auto ring = std::make_shared<runtime::hash_ring>(names, welcome.ring_vnodes,
                                                     welcome.ring_version);
    auto n = static_cast<uint32_t>(names.size());
    std::vector<std::vector<transports::connection_ptr>> node_conns(n);
    std::vector<transports::welcome_msg> welcomes(n);
    welcomes[welcome.node_index] = welcome;
    node_conns[welcome.node_index] = attach_all(welcome, std::move(first), opts.connect);
    hello.shm_segment.clear(); // chunks travel to their homes over TCP
    hello.shm_nonce = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (i == welcome.node_index)
        continue;
      auto address = reachable(welcome.job_nodes[i], opts.connect);
      auto c = connect(address);
      welcomes[i] = say_hello(c, address, hello);
      auto& w = welcomes[i];
      if (w.job_id != welcome.job_id || w.job_node_names != names || w.node_index != i
          || w.ring_version != welcome.ring_version)
        throw rw::error(errc::spec_mismatch,
                        fmt::format("node {} at {} does not hold job '{}' as node {} of "
                                    "[{}] (ring version {}): the job's nodes disagree",
                                    names[i], address, opts.job.name, i,
                                    fmt::join(names, ","), welcome.ring_version));
      node_conns[i] = attach_all(w, std::move(c), address);
    }
    std::vector<std::shared_ptr<const runtime::routing_table>> tables;
    std::vector<uint32_t> bases;
    std::vector<transports::connection_ptr> conns;
    for (uint32_t i = 0; i < n; ++i) {
      tables.push_back(std::make_shared<runtime::routing_table>(
        opts.job, welcomes[i].num_shards, welcomes[i].shard_endpoints, ring.get(), i));
      bases.push_back(static_cast<uint32_t>(conns.size()));
      conns.insert(conns.end(), node_conns[i].begin(), node_conns[i].end());
    }
    auto routes = std::make_shared<runtime::job_routes>(ring, std::move(tables),
                                                        std::move(bases));
    link = std::make_shared<actors::worker_link>(ep, std::move(conns), welcome.job_id,
                                                 opts.rank, std::move(routes));
  }

  void handshake() {
    transports::hello_msg hello{opts.job, opts.rank, {}, 0, !opts.token.empty()};
    std::unique_ptr<transports::shm::worker_channel> channel;
    if (opts.transport != "tcp") {
      try {
        channel = std::make_unique<transports::shm::worker_channel>(opts.job);
        hello.shm_segment = channel->name();
        hello.shm_nonce = channel->nonce();
      } catch (const std::exception& e) {
        if (opts.transport == "shm")
          throw rw::error(errc::io_error, std::string("no shared memory: ") + e.what());
      }
    }
    auto first = connect(opts.connect);
    welcome = say_hello(first, opts.connect, hello);
    auto single = [&] {
      return std::make_shared<runtime::job_routes>(std::make_shared<runtime::routing_table>(
        opts.job, welcome.num_shards, welcome.shard_endpoints));
    };
    if (welcome.shm) {
      try {
        channel->connect(welcome.shm_bell, welcome.shm_params, opts.job);
      } catch (const std::exception& e) {
        throw rw::error(errc::io_error, std::string("shared memory with the node: ") + e.what());
      }
      link = std::make_shared<actors::worker_link>(
        ep, std::vector<transports::connection_ptr>{first}, welcome.job_id, opts.rank,
        single(), std::move(channel));
      return;
    }
    if (opts.transport == "shm")
      throw rw::error(errc::io_error,
                      welcome.job_nodes.size() > 1
                        ? std::string("the job spans several nodes, so its chunks travel "
                                      "over TCP; use transport auto or tcp")
                        : std::string("the node did not take this worker's shared memory (it "
                                      "is on another host, or runs with --no-shm); use "
                                      "transport auto or tcp"));
    channel.reset(); // removes the segment
    if (welcome.job_nodes.size() > 1) {
      join_nodes(std::move(first), std::move(hello));
      return;
    }
    // One connection per node endpoint; attach to the others with the token.
    link = std::make_shared<actors::worker_link>(ep, attach_all(welcome, first, opts.connect),
                                                 welcome.job_id, opts.rank, single());
  }
};

worker::worker(worker_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opts = std::move(options);
  if (auto why = validate(d.opts.job, defaults::max_chunk_bytes, defaults::max_workers);
      !why.empty())
    throw rw::error(errc::invalid_spec, "invalid job spec: " + why);
  if (d.opts.transport != "auto" && d.opts.transport != "tcp" && d.opts.transport != "shm")
    throw rw::error(errc::invalid_spec, "transport must be auto, tcp or shm, not '"
                                          + d.opts.transport + "'");
  if (d.opts.rank >= d.opts.job.num_workers)
    throw rw::error(errc::bad_rank, fmt::format("rank {} is outside 0..{}", d.opts.rank,
                                                d.opts.job.num_workers - 1));
  for (uint32_t i = 0; i < d.opts.job.tensors.size(); ++i)
    d.index.emplace(d.opts.job.tensors[i].name, i);
  d.clocks.assign(d.opts.job.tensors.size(), 0);
  d.ep = std::make_shared<transports::tcp::endpoint>(
    d.opts.request_timeout,
    transports::receive_limits{d.opts.job.chunk_bytes, defaults::max_control_bytes});
  d.handshake();
  d.cfg.set("scheduler.max-threads", 2);
  d.cfg.set("logger.verbosity", caf::atom("quiet"));
  d.sys = std::make_unique<caf::actor_system>(d.cfg);
  d.proxy = actors::spawn_worker_proxy(*d.sys, d.link, d.opts.request_timeout);
  d.link->start(d.proxy);
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
actors::worker_op sparse_op(const job_spec& spec, actors::worker_op::kind_t kind, uint32_t t,
                            const uint64_t* indices, const float* values, size_t count,
                            float* out) {
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

std::future<void> worker::push_pull_sparse(const std::string& tensor, const uint64_t* indices,
                                           const float* values, size_t count, float* out) {
  if (out == nullptr && shared_result(tensor) == nullptr)
    throw rw::error(errc::invalid_spec, "push_pull_sparse needs an output buffer over TCP");
  return impl_->submit(sparse_op(impl_->opts.job, actors::worker_op::push_pull,
                                 impl_->tensor(tensor), indices, values, count, out));
}

std::future<void> worker::pull_changed(const std::string& tensor, float* out, uint64_t since) {
  actors::worker_op op{actors::worker_op::pull, impl_->tensor(tensor), nullptr, out, since,
                       nullptr};
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
  return impl_->link && impl_->link->shm() ? "shm" : "tcp";
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

} // namespace rw
