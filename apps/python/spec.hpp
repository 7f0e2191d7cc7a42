#pragma once
// A job's spec (workers, optimizer and its hyper-parameters, chunk size, consistency,
// compression, tensors) and a hyper-parameter change from the keyword arguments of rackweave.Worker,
// rackweave.create_job and set_hyper.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "rackweave/job_spec.hpp"

namespace rw::python {

/// The spec, without tensors. An unknown optimizer, a bad consistency or compression
/// is a ValueError saying which.
inline job_spec spec_from(const std::string& job, uint32_t workers,
                          const std::string& optimizer, float lr, float momentum,
                          float weight_decay, float beta1, float beta2, float eps,
                          uint32_t chunk_bytes, const std::string& consistency,
                          const std::string& compression = "none",
                          bool compress_updates = false) {
  job_spec spec;
  spec.name = job;
  spec.num_workers = workers;
  spec.chunk_bytes = chunk_bytes;
  auto kind = parse_optimizer_kind(optimizer);
  if (!kind)
    throw pybind11::value_error("unknown optimizer '" + optimizer
                                + "' (sum, sgd, momentum, nesterov, adam, lamb, lars)");
  spec.optimizer.kind = *kind;
  spec.optimizer.learning_rate = lr;
  spec.optimizer.momentum = momentum;
  spec.optimizer.weight_decay = weight_decay;
  spec.optimizer.beta1 = beta1;
  spec.optimizer.beta2 = beta2;
  spec.optimizer.epsilon = eps;
  try {
    spec.consistency = parse_consistency(consistency);
    spec.compression = parse_compression(compression);
  } catch (const std::exception& e) {
    throw pybind11::value_error(e.what());
  }
  spec.compression.updates = compress_updates;
  return spec;
}

/// A hyper_change from Python's keyword arguments (a ValueError if it is not valid).
inline hyper_change hyper_from(uint64_t at_clock, std::optional<float> lr,
                               std::optional<float> momentum,
                               std::optional<float> weight_decay,
                               std::optional<float> beta1, std::optional<float> beta2) {
  hyper_change c{at_clock, lr, momentum, weight_decay, beta1, beta2};
  if (auto why = validate(c); !why.empty())
    throw pybind11::value_error("set_hyper: " + why);
  return c;
}

/// The job's tensors from {"name": elements} or [(name, elements[, has_init]), ...]
/// (a list keeps their order).
inline std::vector<tensor_spec> tensors_from(const pybind11::object& obj) {
  std::vector<tensor_spec> out;
  if (pybind11::isinstance<pybind11::dict>(obj)) {
    for (auto item : obj.cast<pybind11::dict>())
      out.push_back(
        {item.first.cast<std::string>(), item.second.cast<uint64_t>(), false});
    return out;
  }
  for (auto item : obj) {
    auto t = item.cast<pybind11::tuple>();
    if (t.size() < 2 || t.size() > 3)
      throw pybind11::value_error("tensors: each entry is (name, elements[, has_init])");
    out.push_back({t[0].cast<std::string>(), t[1].cast<uint64_t>(),
                   t.size() == 3 && t[2].cast<bool>()});
  }
  return out;
}

} // namespace rw::python
