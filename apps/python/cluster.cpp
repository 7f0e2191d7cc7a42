#include "apps/python/cluster.hpp"
#include "apps/python/spec.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <pybind11/stl.h>

#include "actors/cluster_messages.hpp"
#include "actors/node/control_tls.hpp"
#include "actors/node/idle_policy.hpp"
#include "apps/shell/open_cluster.hpp"
#include "rackweave/errc.hpp"
#include "runtime/credentials.hpp"

namespace py = pybind11;

namespace rw::python {

namespace {

// A connection to the coordinator found through the node at `connect`, for one call.
struct coordinator_session {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<shell::cluster_api> client;

  coordinator_session(const std::string& connect, const std::string& secret_file,
                      const std::string& tenant, const actors::tls_files& tls,
                      double timeout) {
    actors::register_cluster_types(cfg);
    std::string secret;
    if (!tenant.empty() && secret_file.empty())
      throw std::invalid_argument("tenant= needs secret_file= (the tenant's secret)");
    if (!secret_file.empty())
      secret = tenant.empty() ? runtime::read_secret_file(secret_file)
                              : runtime::read_secret_file(secret_file, "tenant '" + tenant
                                                                         + "' secret");
    actors::control_identity control;
    control.files = tls;
    if (tenant.empty()) // a tenant speaks to the tenant door, not over the middleman
      control.cluster_secret = secret;
    // Bad files: RuntimeError, as a bad secret.
    actors::configure_control_tls(cfg, control);
    cfg.set("logger.verbosity", caf::atom("quiet"));
    cfg.set("scheduler.max-threads", 2);
    actors::configure_idle_policy(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
    try {
      py::gil_scoped_release nogil;
      client = shell::open_cluster(*sys, connect, ms, secret, tenant);
    } catch (const shell::shell_error& e) {
      throw rw::error(e.code(), e.what());
    }
  }
};

} // namespace

void add_cluster_calls(py::module_& m) {
  m.def(
    "create_job",
    [](const std::string& connect, const std::string& job, uint32_t workers,
       const std::string& optimizer, float lr, float momentum, float weight_decay,
       float beta1, float beta2, float eps, uint32_t chunk_bytes,
       const std::string& consistency, const std::string& node,
       const std::vector<std::string>& racks, const std::string& reduction, int replicas,
       uint64_t checkpoint_every, const std::string& checkpoint_dir,
       const std::string& secret_file, const std::string& tls_cert,
       const std::string& tls_key, const std::string& tls_ca, double timeout,
       const py::object& tensors, const std::string& tenant, uint64_t memory,
       const std::string& compression, bool compress_updates) {
      auto spec = spec_from(job, workers, optimizer, lr, momentum, weight_decay, beta1,
                            beta2, eps, chunk_bytes, consistency, compression,
                            compress_updates);
      if (!tensors.is_none())
        spec.tensors = tensors_from(tensors);
      actors::job_placement where;
      where.node = node;
      where.racks = racks;
      where.reduction = reduction;
      where.replicas = replicas;
      where.checkpoint_every = checkpoint_every;
      where.checkpoint_dir = checkpoint_dir;
      where.memory = memory;
      coordinator_session s{
        connect, secret_file, tenant, {tls_cert, tls_key, tls_ca}, timeout};
      actors::job_created created;
      try {
        py::gil_scoped_release nogil;
        created = s.client->job_create(spec, where);
      } catch (const shell::shell_error& e) {
        throw rw::error(e.code(), e.what());
      }
      py::dict out;
      out["name"] = created.job.name;
      out["id"] = created.job.id;
      out["token"] = created.token;
      out["node"] = created.job.node;
      out["endpoints"] = created.job.endpoints;
      out["nodes"] = created.job.layout.nodes;
      out["reduction"] = created.job.layout.reduction;
      out["memory"] = created.job.max_memory;
      return out;
    },
    py::arg("connect"), py::arg("job"), py::arg("workers"), py::arg("optimizer") = "sum",
    py::arg("lr") = 0.01f, py::arg("momentum") = 0.9f, py::arg("weight_decay") = 0.0f,
    py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f, py::arg("eps") = 1e-8f,
    py::arg("chunk_bytes") = defaults::chunk_bytes, py::arg("consistency") = "bsp",
    py::arg("node") = "", py::arg("racks") = std::vector<std::string>{},
    py::arg("reduction") = "auto", py::arg("replicas") = -1,
    py::arg("checkpoint_every") = 0, py::arg("checkpoint_dir") = "",
    py::arg("secret_file") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
    py::arg("tls_ca") = "", py::arg("timeout") = 10.0, py::arg("tensors") = py::none(),
    py::arg("tenant") = "", py::arg("memory") = 0, py::arg("compression") = "none",
    py::arg("compress_updates") = false,
    "Creates job `job` through the cluster coordinator found through the node at "
    "`connect` (any node's HOST:PORT), as rw.job_create does; returns a dict with its "
    "name, id, token (shown once: the workers prove it), node, endpoints (where its "
    "workers connect), nodes and reduction. The workers' spec must match this one. "
    "`tensors` ({name: elements} or [(name, elements[, has_init])]) declares the job's "
    "tensors now, so workers may join with the job's name and token alone; without it "
    "the first worker declares them. `memory` (bytes; 0: the nodes' own limit) is the "
    "node "
    "memory the job may take, which a tenant's job must give. With `tenant`, "
    "`secret_file` is that tenant's secret: the job is created in its namespace "
    "(TENANT:NAME, the name returned) within its quotas. `compression` ('none', 'bf16', "
    "'fp16', 'topk:RATIO', 'topk:RATIO,warmup=STEPS') is how the workers' gradients "
    "travel, `compress_updates` "
    "whether the results travel back as 16-bit values too (bf16, fp16).");
  m.def(
    "delete_job",
    [](const std::string& connect, const std::string& job, const std::string& secret_file,
       const std::string& tls_cert, const std::string& tls_key, const std::string& tls_ca,
       double timeout, const std::string& tenant) {
      coordinator_session s{
        connect, secret_file, tenant, {tls_cert, tls_key, tls_ca}, timeout};
      try {
        py::gil_scoped_release nogil;
        s.client->job_delete(job);
      } catch (const shell::shell_error& e) {
        throw rw::error(e.code(), e.what());
      }
    },
    py::arg("connect"), py::arg("job"), py::arg("secret_file") = "",
    py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("tls_ca") = "",
    py::arg("timeout") = 10.0, py::arg("tenant") = "",
    "Stops job `job` if it runs and forgets it, as rw.job_delete does (with `tenant`: "
    "one of that tenant's jobs, `secret_file` being its secret).");
  m.def(
    "set_hyper",
    [](const std::string& connect, const std::string& job, uint64_t at_clock,
       std::optional<float> lr, std::optional<float> momentum,
       std::optional<float> weight_decay, std::optional<float> beta1,
       std::optional<float> beta2, const std::string& secret_file,
       const std::string& tls_cert, const std::string& tls_key, const std::string& tls_ca,
       double timeout, const std::string& tenant) {
      auto change = hyper_from(at_clock, lr, momentum, weight_decay, beta1, beta2);
      coordinator_session s{
        connect, secret_file, tenant, {tls_cert, tls_key, tls_ca}, timeout};
      try {
        py::gil_scoped_release nogil;
        return s.client->job_set(job, change);
      } catch (const shell::shell_error& e) {
        throw rw::error(e.code(), e.what());
      }
    },
    py::arg("connect"), py::arg("job"), py::arg("at_clock"), py::arg("lr") = py::none(),
    py::arg("momentum") = py::none(), py::arg("weight_decay") = py::none(),
    py::arg("beta1") = py::none(), py::arg("beta2") = py::none(),
    py::arg("secret_file") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
    py::arg("tls_ca") = "", py::arg("timeout") = 10.0, py::arg("tenant") = "",
    "Changes the running BSP job's optimizer hyper-parameters (those given) for the step "
    "of clock `at_clock` and every later one, on every chunk and node, as rw.job_set "
    "does; "
    "returns the highest clock the job had reached. Refused (rackweave.Error "
    "clock_out_of_range) if a chunk has run that step already. With `tenant`, "
    "`secret_file` "
    "is that tenant's secret and `job` one of its jobs.");
}

} // namespace rw::python
