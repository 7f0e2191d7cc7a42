// The `rackweave` Python package's native part: rw::worker (rackweave/worker.hpp) for
// Python, on the same public facade C++ users embed.
//
//   w = rackweave.Worker(connect="127.0.0.1:7700", job="j", rank=0, workers=2,
//                        tensors={"w": 1024}, optimizer="sum", token=token)
//   w.push_pull("w", grad, out).result()
//
// Buffers are used in place, never copied: NumPy arrays and CPU torch tensors that are
// float32 and C-contiguous, of exactly the tensor's size (outputs writable). CUDA
// tensors go through rackweave.torch, which stages them (rackweave/staging.py). Anything
// else is a TypeError (dtype, layout, device) or ValueError (size) at the call, never a
// silent copy. Each call returns a Future holding the buffers it uses until it
// completes; result() waits with the GIL released, so other Python threads (other
// workers) run meanwhile. A Future dropped before completion waits for it first, so a
// buffer is never freed while the node still writes into it. Failures raise
// rackweave.Error, whose `code` is the errc name ("unknown_job", "timeout", ...).

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "apps/python/cluster.hpp"
#include "apps/python/spec.hpp"
#include "rackweave/worker.hpp"

namespace py = pybind11;

namespace {

// A float32 buffer of a call, checked: its address, and the object kept alive.
struct checked_buffer {
  float* data = nullptr;
  py::object owner;
};

std::string type_name(const py::handle& h) {
  return py::str(py::type::handle_of(h).attr("__name__"));
}

enum class element { f32, i64 };

// `obj` in place, of `kind` (float32; or 64-bit integers: int64 or uint64), C-contiguous,
// on the CPU: a NumPy array or a torch tensor; `count` its elements.
struct typed_buffer {
  void* data = nullptr;
  uint64_t count = 0;
  py::object owner;
};

typed_buffer buffer_of(const py::object& obj, const std::string& what, bool writable,
                       element kind) {
  const char* want = kind == element::f32 ? "a float32" : "an int64 (or uint64)";
  typed_buffer out;
  out.owner = obj;
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous")) { // torch.Tensor
    auto dtype = py::str(obj.attr("dtype")).cast<std::string>();
    bool ok = kind == element::f32 ? dtype == "torch.float32" : dtype == "torch.int64";
    if (!ok)
      throw py::type_error(what + ": " + want + " tensor is needed, not " + dtype);
    auto device = py::str(obj.attr("device")).cast<std::string>();
    if (device != "cpu")
      throw py::type_error(
        what + ": the tensor is on " + device
        + "; the native Worker reads and writes CPU memory only. For CUDA "
          "tensors use rackweave.torch (ServerOptimizer, or allreduce_hook with "
          "HookState), which stages them through pinned host buffers; or move this "
          "one with .cpu()");
    if (!obj.attr("is_contiguous")().cast<bool>())
      throw py::type_error(what
                           + ": the tensor is not contiguous (call .contiguous() "
                             "first: RackWeave does not copy behind your back)");
    out.count = obj.attr("numel")().cast<uint64_t>();
    if (writable && obj.attr("requires_grad").cast<bool>() && py::hasattr(obj, "is_leaf")
        && obj.attr("is_leaf").cast<bool>())
      throw py::type_error(what
                           + ": the tensor requires grad; write into one that does "
                             "not (a .detach() view, or torch.no_grad())");
    out.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    return out;
  }
  if (!py::hasattr(obj, "__array_interface__"))
    throw py::type_error(what + ": a NumPy array or a torch tensor is needed, not "
                         + type_name(obj));
  py::dict ai = obj.attr("__array_interface__");
  auto typestr = ai["typestr"].cast<std::string>();
  bool ok = kind == element::f32 ? typestr == "<f4"
                                 : (typestr == "<i8" || typestr == "<u8");
  if (!ok)
    throw py::type_error(what + ": " + want + " array is needed, not typestr " + typestr);
  if (!ai.contains("strides") || !ai["strides"].is_none()) {
    // Strides given: contiguous only if they are C order's.
    bool c_order = py::bool_(obj.attr("flags")["C_CONTIGUOUS"]);
    if (!c_order)
      throw py::type_error(what
                           + ": the array is not C-contiguous (numpy."
                             "ascontiguousarray it first: RackWeave does not copy behind "
                             "your back)");
  }
  uint64_t n = 1;
  for (auto d : ai["shape"].cast<py::tuple>())
    n *= d.cast<uint64_t>();
  out.count = n;
  auto data = ai["data"].cast<py::tuple>();
  if (writable && data[1].cast<bool>())
    throw py::type_error(what + ": the array is read-only");
  out.data = reinterpret_cast<void*>(data[0].cast<uintptr_t>());
  return out;
}

// `obj` as `elems` float32 elements in place: a NumPy array or a CPU torch tensor.
checked_buffer float_buffer(const py::object& obj, uint64_t elems,
                            const std::string& what, bool writable) {
  auto b = buffer_of(obj, what, writable, element::f32);
  if (b.count != elems)
    throw py::value_error(what + ": it has " + std::to_string(b.count)
                          + " elements, the job's tensor " + std::to_string(elems));
  return {static_cast<float*>(b.data), b.owner};
}

// Calls in flight (one, or a bucket's: Worker.push_pull_regions): their futures and the
// buffers they use.
class call_future {
public:
  call_future(std::future<void> f, std::vector<py::object> keep)
    : keep_(std::move(keep)) {
    fs_.push_back(f.share());
  }
  call_future(std::vector<std::shared_future<void>> fs, std::vector<py::object> keep)
    : fs_(std::move(fs)), keep_(std::move(keep)) {}
  call_future(const call_future&) = delete;
  call_future& operator=(const call_future&) = delete;
  ~call_future() {
    py::gil_scoped_release nogil;
    for (auto& f : fs_) // the node may still write into the buffers: wait for it
      if (f.valid())
        f.wait();
  }

  /// Waits (the GIL released) until the call completes, at most `timeout` seconds;
  /// raises rackweave.Error if it failed, TimeoutError if it is still running.
  /// Every call has completed before the first failure is raised (none writes into
  /// the buffers any more), but for TimeoutError.
  void result(std::optional<double> timeout) {
    {
      py::gil_scoped_release nogil;
      if (timeout) {
        auto until = std::chrono::steady_clock::now()
                     + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(*timeout));
        for (auto& f : fs_)
          if (f.wait_until(until) != std::future_status::ready) {
            py::gil_scoped_acquire gil;
            PyErr_SetString(PyExc_TimeoutError, "the call is still running");
            throw py::error_already_set();
          }
      } else {
        for (auto& f : fs_)
          f.wait();
      }
    }
    for (auto& f : fs_)
      f.get(); // rethrows the first failed call's rw::error
  }
  bool done() const {
    for (auto& f : fs_)
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        return false;
    return true;
  }

private:
  std::vector<std::shared_future<void>> fs_;
  std::vector<py::object> keep_;
};

// A buffer registered with the fabric NIC (Worker.register_buffer): the registration
// and the buffer both live until release() or the object goes.
class py_registration {
public:
  py_registration(std::shared_ptr<void> handle, py::object buffer)
    : handle_(std::move(handle)), buffer_(std::move(buffer)) {}
  void release() {
    handle_.reset();
    buffer_ = py::none();
  }
  bool active() const noexcept { return handle_ != nullptr; }

private:
  std::shared_ptr<void> handle_;
  py::object buffer_;
};

class py_worker {
public:
  explicit py_worker(rw::worker_options o) {
    py::gil_scoped_release nogil;
    w_ = std::make_unique<rw::worker>(std::move(o));
  }

  /// Rank 0 only: the job's hyper-parameters from at_clock on (worker::set_hyper).
  uint64_t set_hyper(uint64_t at_clock, std::optional<float> lr,
                     std::optional<float> momentum, std::optional<float> weight_decay,
                     std::optional<float> beta1, std::optional<float> beta2) {
    auto change = rw::python::hyper_from(at_clock, lr, momentum, weight_decay, beta1,
                                         beta2);
    py::gil_scoped_release nogil;
    return w_->set_hyper(change);
  }

  /// The optimizer state (worker::pull_state, load_state, go_on_from), blocking with
  /// the GIL released.
  uint64_t pull_state(const std::string& t, const py::object& out) {
    auto n = uint64_t{w_->state_arrays()} * elements(t);
    auto b = float_buffer(out, n, "pull_state('" + t + "') output", true);
    py::gil_scoped_release nogil;
    return w_->pull_state(t, rw::floats{b.data, n});
  }
  void load_state(const std::string& t, const py::object& state, uint64_t clock) {
    auto n = uint64_t{w_->state_arrays()} * elements(t);
    auto b = float_buffer(state, n, "load_state('" + t + "') state", false);
    py::gil_scoped_release nogil;
    w_->load_state(t, rw::const_floats{b.data, n}, clock);
  }
  /// The buffer registered with the fabric NIC (worker::register_buffer), or None.
  py::object register_buffer(const py::object& buffer) {
    auto b = buffer_of(buffer, "register_buffer", false, element::f32);
    std::shared_ptr<void> handle;
    {
      py::gil_scoped_release nogil;
      handle = w_->register_buffer(b.data, b.count * sizeof(float));
    }
    if (!handle)
      return py::none();
    return py::cast(std::make_unique<py_registration>(std::move(handle), b.owner));
  }

  void go_on_from(const std::string& t, uint64_t clock) {
    py::gil_scoped_release nogil;
    w_->go_on_from(t, clock);
  }

  std::unique_ptr<call_future> push(const std::string& t, const py::object& grad) {
    auto g = float_buffer(grad, elements(t), "push('" + t + "') gradient", false);
    return start(w_->push(t, g.data), {g.owner});
  }
  std::unique_ptr<call_future> pull(const std::string& t, const py::object& out,
                                    uint64_t min_version) {
    auto o = float_buffer(out, elements(t), "pull('" + t + "') output", true);
    return start(w_->pull(t, o.data, min_version), {o.owner});
  }
  std::unique_ptr<call_future> push_pull(const std::string& t, const py::object& grad,
                                         const py::object& out) {
    auto g = float_buffer(grad, elements(t), "push_pull('" + t + "') gradient", false);
    auto o = float_buffer(out, elements(t), "push_pull('" + t + "') output", true);
    return start(w_->push_pull(t, g.data, o.data), {g.owner, o.owner});
  }
  /// push_pull in place for each (tensor, first element) of `regions`, each the
  /// tensor's elements of `buffer` from there: one call for a bucket of tensors staged
  /// in one arena (rackweave.staging). Every region is checked before any is pushed.
  std::unique_ptr<call_future> push_pull_regions(const py::object& buffer,
                                                 const py::sequence& regions) {
    auto b = buffer_of(buffer, "push_pull_regions buffer", true, element::f32);
    auto* base = static_cast<float*>(b.data);
    std::vector<std::pair<std::string, float*>> todo;
    todo.reserve(py::len(regions));
    for (auto item : regions) {
      auto pair = item.cast<py::tuple>();
      if (pair.size() != 2)
        throw py::value_error(
          "push_pull_regions: each region is (tensor, first element)");
      auto name = pair[0].cast<std::string>();
      auto first = pair[1].cast<uint64_t>();
      auto n = elements(name);
      if (first > b.count || n > b.count - first)
        throw py::value_error("push_pull_regions: tensor '" + name + "' ("
                              + std::to_string(n) + " elements) from element "
                              + std::to_string(first) + " runs past the buffer's "
                              + std::to_string(b.count));
      todo.emplace_back(std::move(name), base + first);
    }
    std::vector<std::shared_future<void>> started;
    started.reserve(todo.size());
    try {
      for (auto& [name, at] : todo)
        started.push_back(w_->push_pull(name, at, at).share());
    } catch (...) {
      // Those started may still write into the buffer: held, and waited for, before
      // the failure is raised.
      call_future wait_for_started{std::move(started), {b.owner}};
      throw;
    }
    return std::make_unique<call_future>(std::move(started),
                                         std::vector<py::object>{b.owner});
  }
  std::unique_ptr<call_future> push_sparse(const std::string& t,
                                           const py::object& indices,
                                           const py::object& values) {
    auto [i, v] = sparse_pair(t, "push_sparse", indices, values);
    return start(w_->push_sparse(t, static_cast<const uint64_t*>(i.data),
                                 static_cast<const float*>(v.data), i.count),
                 {i.owner, v.owner});
  }
  std::unique_ptr<call_future> push_pull_sparse(const std::string& t,
                                                const py::object& indices,
                                                const py::object& values,
                                                const py::object& out) {
    auto [i, v] = sparse_pair(t, "push_pull_sparse", indices, values);
    auto o = float_buffer(out, elements(t), "push_pull_sparse('" + t + "') output", true);
    return start(w_->push_pull_sparse(t, static_cast<const uint64_t*>(i.data),
                                      static_cast<const float*>(v.data), i.count, o.data),
                 {i.owner, v.owner, o.owner});
  }
  std::unique_ptr<call_future> pull_changed(const std::string& t, const py::object& out,
                                            uint64_t since) {
    auto o = float_buffer(out, elements(t), "pull_changed('" + t + "') output", true);
    return start(w_->pull_changed(t, o.data, since), {o.owner});
  }
  /// `out` is kept (the node writes into it until the worker closes); `on_version` runs
  /// on the receiver thread with the GIL taken.
  std::unique_ptr<call_future> subscribe(const std::string& t, const py::object& out,
                                         const py::object& on_version) {
    auto o = float_buffer(out, elements(t), "subscribe('" + t + "') output", true);
    std::function<void(uint64_t)> cb = [](uint64_t) {};
    if (!on_version.is_none()) {
      if (!PyCallable_Check(on_version.ptr()))
        throw py::type_error("subscribe: on_version must be callable, not "
                             + type_name(on_version));
      // Released with the GIL held, whatever thread drops the last copy.
      std::shared_ptr<py::object> fn(new py::object(on_version), [](py::object* f) {
        py::gil_scoped_acquire gil;
        delete f;
      });
      cb = [fn](uint64_t version) {
        py::gil_scoped_acquire gil;
        try {
          (*fn)(version);
        } catch (py::error_already_set& e) {
          e.discard_as_unraisable("rackweave subscribe on_version");
        }
      };
    }
    subscribed_.push_back(o.owner);
    return start(w_->subscribe(t, o.data, std::move(cb)), {o.owner});
  }
  uint32_t last_changed(const std::string& t) const { return w_->last_changed(t); }
  std::unique_ptr<call_future> init(const std::string& t, const py::object& values) {
    auto v = float_buffer(values, elements(t), "init('" + t + "') values", false);
    return start(w_->init(t, v.data), {v.owner});
  }
  void close() {
    py::gil_scoped_release nogil;
    w_->close();
  }
  rw::worker& get() { return *w_; }

private:
  std::vector<py::object> subscribed_; // outputs the node writes into until close

  // A sparse push's indices and values, checked: as many of each, indices in range.
  std::pair<typed_buffer, typed_buffer> sparse_pair(const std::string& t,
                                                    const char* call,
                                                    const py::object& indices,
                                                    const py::object& values) {
    auto what = std::string{call} + "('" + t + "') ";
    auto i = buffer_of(indices, what + "indices", false, element::i64);
    auto v = buffer_of(values, what + "values", false, element::f32);
    if (i.count != v.count)
      throw py::value_error(what + ": " + std::to_string(i.count) + " indices but "
                            + std::to_string(v.count) + " values");
    return {i, v};
  }
  uint64_t elements(const std::string& t) const {
    if (sizes_.empty()) // the job's tensors are fixed once it is joined
      for (auto& s : w_->spec().tensors)
        sizes_.emplace(s.name, s.elements);
    if (auto it = sizes_.find(t); it != sizes_.end())
      return it->second;
    throw rw::error(rw::errc::unknown_tensor,
                    "tensor '" + t + "' is not part of job '" + w_->spec().name + "'");
  }
  static std::unique_ptr<call_future> start(std::future<void> f,
                                            std::vector<py::object> keep) {
    return std::make_unique<call_future>(std::move(f), std::move(keep));
  }

  std::unique_ptr<rw::worker> w_;
  mutable std::unordered_map<std::string, uint64_t> sizes_; // elements, by tensor
};

// A job spec as a dict (Worker.spec).
py::dict spec_dict(const rw::job_spec& s) {
  py::dict d;
  d["name"] = s.name;
  d["workers"] = s.num_workers;
  d["chunk_bytes"] = s.chunk_bytes;
  d["optimizer"] = std::string{rw::to_string(s.optimizer.kind)};
  d["lr"] = s.optimizer.learning_rate;
  d["momentum"] = s.optimizer.momentum;
  d["weight_decay"] = s.optimizer.weight_decay;
  d["beta1"] = s.optimizer.beta1;
  d["beta2"] = s.optimizer.beta2;
  d["eps"] = s.optimizer.epsilon;
  d["consistency"] = rw::to_string(s.consistency);
  d["compression"] = rw::to_string(s.compression);
  d["compress_updates"] = s.compression.updates;
  py::list tensors;
  for (auto& t : s.tensors)
    tensors.append(py::make_tuple(t.name, t.elements, t.has_init));
  d["tensors"] = tensors;
  return d;
}

} // namespace

PYBIND11_MODULE(_rackweave, m) {
  m.doc() = "RackWeave workers: gradient exchange through a rack-scale parameter service";
  m.attr("__version__") = RW_VERSION; // the project's version (CMakeLists.txt)

  static py::exception<rw::error> error_type(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const rw::error& e) {
      auto type = py::reinterpret_borrow<py::object>(error_type.ptr());
      py::object inst = type(e.what());
      inst.attr("code") = rw::to_string(e.code());
      PyErr_SetObject(error_type.ptr(), inst.ptr());
    }
  });

  py::class_<call_future>(m, "Future",
                          "A call in flight; it holds the buffers it uses until done.")
    .def("result", &call_future::result, py::arg("timeout") = py::none(),
         "Waits until the call completes (at most `timeout` seconds: TimeoutError); "
         "raises rackweave.Error if it failed.")
    .def("done", &call_future::done, "Whether the call has completed.");

  py::class_<py_registration>(m, "Registration",
                              "A buffer registered with the fabric NIC "
                              "(Worker.register_buffer).")
    .def("release", &py_registration::release,
         "Deregisters it (once no send uses it) and lets go of the buffer.")
    .def_property_readonly("active", &py_registration::active);

  py::class_<py_worker>(m, "Worker", "One rank of a job (rackweave/worker.hpp).")
    .def(
      py::init([](const std::string& connect, const std::string& job, uint32_t rank,
                  std::optional<uint32_t> workers, const py::object& tensors,
                  const std::string& token, std::optional<std::string> optimizer,
                  std::optional<float> lr, std::optional<float> momentum,
                  std::optional<float> weight_decay, std::optional<float> beta1,
                  std::optional<float> beta2, std::optional<float> eps,
                  std::optional<uint32_t> chunk_bytes,
                  std::optional<std::string> consistency, const std::string& transport,
                  double timeout, std::optional<std::string> compression,
                  std::optional<bool> compress_updates, const std::string& trace) {
        rw::worker_options o;
        o.connect = connect;
        o.trace = trace;
        o.rank = rank;
        o.token = token;
        o.transport = transport;
        o.request_timeout = std::chrono::milliseconds(
          static_cast<int64_t>(timeout * 1000));
        if (!workers) {
          // The job's name and token alone: the node sends the rest.
          if (optimizer || lr || momentum || weight_decay || beta1 || beta2 || eps
              || chunk_bytes || consistency || compression || compress_updates)
            throw py::value_error("a spec is stated with workers=...: give workers too, "
                                  "or leave out optimizer, its hyper-parameters, "
                                  "chunk_bytes, consistency and compression to take "
                                  "the job's");
          o.spec_from_job = true;
          o.job.name = job;
        } else {
          o.job = rw::python::spec_from(
            job, *workers, optimizer.value_or("sum"), lr.value_or(0.01f),
            momentum.value_or(0.9f), weight_decay.value_or(0.0f), beta1.value_or(0.9f),
            beta2.value_or(0.999f), eps.value_or(1e-8f),
            chunk_bytes.value_or(rw::defaults::chunk_bytes), consistency.value_or("bsp"),
            compression.value_or("none"), compress_updates.value_or(false));
          if (tensors.is_none())
            throw py::value_error("a stated spec needs tensors=...");
        }
        if (!tensors.is_none())
          o.job.tensors = rw::python::tensors_from(tensors);
        return std::make_unique<py_worker>(std::move(o));
      }),
      py::arg("connect"), py::arg("job"), py::arg("rank"),
      py::arg("workers") = py::none(), py::arg("tensors") = py::none(),
      py::arg("token") = "", py::arg("optimizer") = py::none(),
      py::arg("lr") = py::none(), py::arg("momentum") = py::none(),
      py::arg("weight_decay") = py::none(), py::arg("beta1") = py::none(),
      py::arg("beta2") = py::none(), py::arg("eps") = py::none(),
      py::arg("chunk_bytes") = py::none(), py::arg("consistency") = py::none(),
      py::arg("transport") = "tcp", py::arg("timeout") = 120.0,
      py::arg("compression") = py::none(), py::arg("compress_updates") = py::none(),
      py::arg("trace") = "",
      "Connects to the node at `connect` (HOST:PORT) and joins job `job` as `rank` "
      "(GIL released meanwhile). With `workers` the worker states the spec (workers, "
      "tensors, optimizer='sum', lr=0.01, momentum=0.9, weight_decay=0, beta1=0.9, "
      "beta2=0.999, eps=1e-8, chunk_bytes=262144, consistency='bsp', compression='none' "
      "('bf16', 'fp16', 'topk:RATIO', 'topk:RATIO,warmup=STEPS'), "
      "compress_updates=False), which must match "
      "the job's. Without it, the job's name and token are enough: the node sends the "
      "spec (`spec`); `tensors` then declares the tensors of a job that has none yet "
      "(or must match). `token` is the job's, as rw.job_create returned it ('' : a "
      "node started with --open-jobs). `timeout`: seconds a call may wait for the node. "
      "`trace`: a file this worker writes its step timeline to (Chrome trace-event "
      "JSON, one event per operation; '' : none), to load in ui.perfetto.dev beside "
      "the node's `rw-node --trace` file.")
    .def("push", &py_worker::push, py::arg("tensor"), py::arg("grad"),
         "Adds `grad` to the tensor's next clock.")
    .def("pull", &py_worker::pull, py::arg("tensor"), py::arg("out"),
         py::arg("min_version") = 0, "The tensor at version >= min_version, into `out`.")
    .def("push_pull", &py_worker::push_pull, py::arg("tensor"), py::arg("grad"),
         py::arg("out"), "push, then the updated tensor into `out`.")
    .def("push_pull_regions", &py_worker::push_pull_regions, py::arg("buffer"),
         py::arg("regions"),
         "push_pull in place for each (tensor, first element) of `regions`: the "
         "tensor's elements of `buffer` from there are its gradient, and its new values "
         "land over them; one Future for all (result() returns once every one is done). "
         "Each region is checked first: none is pushed if one is wrong.")
    .def(
      "push_sparse", &py_worker::push_sparse, py::arg("tensor"), py::arg("indices"),
      py::arg("values"),
      "A sparse push: values[i] is added at element indices[i] (int64 or uint64 indices, "
      "float32 values, as many of each); every other element counts as zero.")
    .def("push_pull_sparse", &py_worker::push_pull_sparse, py::arg("tensor"),
         py::arg("indices"), py::arg("values"), py::arg("out"),
         "push_sparse, then the updated tensor into `out`.")
    .def("pull_changed", &py_worker::pull_changed, py::arg("tensor"), py::arg("out"),
         py::arg("since"),
         "Only the chunks newer than version `since` into `out` (the rest is left as it "
         "is); last_changed(tensor) then says how many.")
    .def(
      "last_changed", &py_worker::last_changed, py::arg("tensor"),
      "Chunks the last completed pull, push_pull or pull_changed on the tensor received.")
    .def(
      "subscribe", &py_worker::subscribe, py::arg("tensor"), py::arg("out"),
      py::arg("on_version") = py::none(),
      "Eager notification: from now on every new version of the tensor is written into "
      "`out` as the node makes it (kept alive until close), and on_version(v) is called "
      "once every chunk has reached version v, on the worker's receiver thread (keep it "
      "short). The Future completes once the subscription is in place.")
    .def("init", &py_worker::init, py::arg("tensor"), py::arg("values"),
         "Rank 0, tensors declared (name, elements, True): the values of version 0.")
    .def("close", &py_worker::close, "Leaves the job (bye); calls afterwards fail.")
    .def(
      "clock", [](py_worker& w, const std::string& t) { return w.get().clock(t); },
      py::arg("tensor"), "How many pushes this worker made to the tensor.")
    .def_property_readonly("rank", [](py_worker& w) { return w.get().rank(); })
    .def_property_readonly("job_id", [](py_worker& w) { return w.get().job_id(); })
    .def(
      "set_hyper", &py_worker::set_hyper, py::arg("at_clock"), py::arg("lr") = py::none(),
      py::arg("momentum") = py::none(), py::arg("weight_decay") = py::none(),
      py::arg("beta1") = py::none(), py::arg("beta2") = py::none(),
      "Rank 0 only: the job's hyper-parameters (those given) from the step of clock "
      "`at_clock` on, for every chunk on every node (its node asks the cluster's "
      "coordinator, as rw.job_set does). Call it before pushing clock `at_clock`: a "
      "change for a step some chunk has run is refused (clock_out_of_range). Returns the "
      "highest clock the job had reached.")
    .def("register_buffer", &py_worker::register_buffer, py::arg("buffer"),
         "Where chunks travel over libfabric: registers the buffer (float32, a NumPy "
         "array or CPU torch tensor) with the NIC now and returns a Registration that "
         "keeps it (and the buffer) until release() or until it goes, so sends from it "
         "and results landing in it register nothing on the way. None over TCP or "
         "shared memory.")
    .def_property_readonly(
      "fabric_registrations", [](py_worker& w) { return w.get().fabric_registrations(); },
      "Memory registrations this worker's fabric endpoint made (0 over TCP or shared "
      "memory): a steady state makes none.")
    .def_property_readonly(
      "state_arrays", [](py_worker& w) { return w.get().state_arrays(); },
      "Arrays of optimizer state the node keeps per element: 0 (sgd, sum), 1 (momentum, "
      "nesterov, lars) or 2 (adam, lamb: m, then v).")
    .def("pull_state", &py_worker::pull_state, py::arg("tensor"), py::arg("out"),
         "The tensor's optimizer state on the node into `out` (state_arrays times its "
         "elements: array k of element i at out[k * elements + i]); returns its clock. "
         "BSP jobs, once every push of this worker was answered.")
    .def("load_state", &py_worker::load_state, py::arg("tensor"), py::arg("state"),
         py::arg("clock"),
         "Rank 0, resuming: `state` (as pull_state gave it) becomes the tensor's "
         "optimizer state and `clock` its version, in a job at version 0 (after init); "
         "this worker's pushes then go on from `clock`.")
    .def("go_on_from", &py_worker::go_on_from, py::arg("tensor"), py::arg("clock"),
         "Every other rank after rank 0's load_state: waits until the tensor stands at "
         "`clock` on the node, then this worker goes on as if it had pushed the tensor "
         "`clock` times.")
    .def_property_readonly(
      "spec", [](py_worker& w) { return spec_dict(w.get().spec()); },
      "The job's spec: name, workers, chunk_bytes, optimizer, lr, "
      "momentum, weight_decay, beta1, beta2, eps, consistency, and "
      "tensors as [(name, elements, has_init)].")
    .def_property_readonly("transport",
                           [](py_worker& w) { return std::string{w.get().transport()}; })
    .def("__enter__", [](py::object self) { return self; })
    .def("__exit__", [](py_worker& w, py::args) { w.close(); });

  rw::python::add_cluster_calls(m);
}
