# Every benchmark script in bench/ once in smoke mode (--smoke: tiny sizes, a few
# seconds, every reader of every output, RESULTS.md and the plots left alone), against
# this build (--build-dir), so that a benchmark cannot rot unnoticed.
#
# A script that cannot run here at all says "smoke: skipped: WHY" and exits 0, and
# ctest counts the test as skipped: netns.sh without root or where `ip netns add` is
# refused, peers.sh when none of its systems can run. A part that cannot run is left out
# with a "smoke: partly skipped:" line (Gloo in netns.sh, the plots in sweep.sh without
# matplotlib). peers.sh is two tests so that the peers' skip, when their packages are
# missing (CI installs only the build's), shows in ctest's summary while its RackWeave
# systems still run.
#
# None of them uses a fixed port on the host (every node listens on 127.0.0.1:0,
# netns.sh's only fixed port is inside its own namespaces, named after its PID), but
# they share one lock: netns.sh and both peers.sh tests build the peers in the same
# ${PROJECT_BINARY_DIR}/peers, and each starts a node and several workers that want
# every core.

set(rw_bench_smoke_dir ${PROJECT_SOURCE_DIR}/bench)

# rw_bench_smoke(NAME TIMEOUT SCRIPT [ARG...])
function(rw_bench_smoke name timeout script)
  add_test(NAME bench_smoke_${name}
    COMMAND bash ${rw_bench_smoke_dir}/${script} --smoke --build-dir ${PROJECT_BINARY_DIR}
            ${ARGN})
  set_tests_properties(bench_smoke_${name} PROPERTIES
    TIMEOUT ${timeout}
    SKIP_REGULAR_EXPRESSION "smoke: skipped:"
    RESOURCE_LOCK rw_bench_smoke
    LABELS bench_smoke)
endfunction()

rw_bench_smoke(comm 120 comm.sh)
rw_bench_smoke(control 120 control.sh)
rw_bench_smoke(kernel 120 kernel.sh)
rw_bench_smoke(netns 180 netns.sh)
rw_bench_smoke(netns_racks 180 netns.sh --racks 2)
rw_bench_smoke(rack_bound 240 rack-bound.sh)
rw_bench_smoke(priority 120 priority.sh)
rw_bench_smoke(failover 180 failover.sh)
rw_bench_smoke(balance 120 balance.sh)
rw_bench_smoke(sweep 180 sweep.sh)
rw_bench_smoke(scaling 240 scaling.sh)
rw_bench_smoke(peers_rackweave 180 peers.sh --systems "rackweave-tcp rackweave-shm rackweave-fabric")
rw_bench_smoke(peers_others 240 peers.sh --systems "gloo torch-gloo mpi-shm mpi-tcp")
rw_bench_smoke(scale 240 scale.sh)
rw_bench_smoke(many_core 180 many-core.sh --stages "facts pollers")
rw_bench_smoke(torch 240 torch.sh)
rw_bench_smoke(gpu 420 gpu.sh)
rw_bench_smoke(memory 180 memory.sh)
rw_bench_smoke(soak 240 soak.sh)
rw_bench_smoke(compression 300 compression.sh)
rw_bench_smoke(hostile 180 hostile.sh)
rw_bench_smoke(trace 120 trace.sh)
rw_bench_smoke(staging 240 staging.sh)
rw_bench_smoke(fabric_ceiling 120 fabric-ceiling.sh)
