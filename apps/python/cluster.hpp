#pragma once
// The rackweave package's cluster calls: creating and deleting a job through the
// cluster coordinator, as rw-shell's rw.job_create and rw.job_delete do, so a training
// script needs no shell.

#include <cstdint>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

#include "rackweave/job_spec.hpp"

namespace rw::python {

/// rw.job_set through the coordinator found through the node at `connect`: returns the
/// highest clock the job had reached. Throws rw::error.
uint64_t set_hyper(const std::string& connect, const std::string& job,
                   const hyper_change& change, const std::string& secret_file, double timeout);

/// A hyper_change from Python's keyword arguments (a ValueError if it is not valid).
hyper_change hyper_from(uint64_t at_clock, std::optional<float> lr,
                        std::optional<float> momentum, std::optional<float> weight_decay,
                        std::optional<float> beta1, std::optional<float> beta2);

/// Adds create_job, delete_job and set_hyper to `m`. Their failures throw rw::error (the module
/// turns it into rackweave.Error).
void add_cluster_calls(pybind11::module_& m);

} // namespace rw::python
