#pragma once
// The rackweave package's cluster calls: creating and deleting a job and changing its
// hyper-parameters through the cluster coordinator, as rw-shell's rw.job_create,
// rw.job_delete and rw.job_set do, so a training script needs no shell.

#include <pybind11/pybind11.h>

namespace rw::python {

/// Adds create_job, delete_job and set_hyper to `m`. Their failures throw rw::error
/// (the module turns it into rackweave.Error).
void add_cluster_calls(pybind11::module_& m);

} // namespace rw::python
