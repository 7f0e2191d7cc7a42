#pragma once
// Joining a job as a worker, over TCP: hello to the node at `connect` (answering its
// challenge with a proof of the token), attach to the node's other endpoints, and, for
// a job on several nodes (the welcome lists them), the same with every other node of
// the job, so each chunk can travel to its home. Shared memory is taken where the
// node offers it for a one-node job. Blocking; every wait is bounded by the request
// timeout. Used by the worker facade and by a rack-agg's uplink (hierarchical jobs).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "protocol/control.hpp"
#include "rackweave/job_spec.hpp"
#include "runtime/chunking.hpp"
#include "transports/shm/worker_channel.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw::actors {

struct join_request {
  std::string connect; // HOST:PORT of a node of the job
  job_spec job;
  uint32_t rank = 0;
  std::string token;              // "": no credentials (a node with --open-jobs)
  std::string transport = "auto"; // auto, tcp, shm or fabric
  std::string rack;      // the worker's rack option ("": none; see rack_choice.hpp)
  std::string picked_by; // why `connect` ("": the caller chose it), sent in the hello
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{defaults::request_timeout_ms};
  /// State only job.name (and job.tensors, for a job without tensors yet): the node
  /// sends the job's spec (joined_job::welcome.spec). Over TCP only: a shared memory
  /// segment is sized from the tensors before the hello.
  bool spec_from_job = false;
};

struct joined_job {
  protocol::welcome_msg welcome;                 // the first node's
  std::vector<transports::connection_ptr> conns; // every node's endpoints, node by node
  std::vector<std::string> conn_nodes;           // the name of the node of each
  std::vector<std::string> node_addresses;       // each node's HOST:PORT, in that order
  std::shared_ptr<const runtime::job_routes> routes;
  /// A job on several nodes: what routes it by a later ring (a node drained); else null.
  std::shared_ptr<const runtime::routes_basis> basis;
  std::unique_ptr<transports::shm::worker_channel> shm; // null over TCP
  /// Over fabric: the worker's fabric endpoint (its one connection is conns[0], serving
  /// every shard) and the TCP connection that stays for liveness. Null otherwise.
  std::shared_ptr<transports::endpoint> fabric;
  transports::connection_ptr companion;
  /// Where the rank goes on from: the lowest of every node's welcome's resume clock.
  uint64_t resume_clock = 0;
};

/// Joins the job through `ep` (whose poll the caller does not run meanwhile). Throws
/// rw::error: refused, unreachable, timed out. A node that answers `moved` is
/// followed: to the one node it names, or, when it names several (it could not tell
/// which is nearest), to the one with the lowest TCP connect round trip (measured here,
/// bounded, and said on stderr with the numbers). A node that names itself (the cluster
/// placed the job there and its grant is on its way) is asked again every 200 ms, up
/// to 15 times.

joined_job join_job(transports::tcp::endpoint& ep, const join_request& req);

/// One more node of a job the worker is in, while it runs (a node joined the job).
struct joined_node {
  protocol::welcome_msg welcome;
  std::vector<transports::connection_ptr> conns; // the node's endpoints, in order
};

/// Joins node `node` (at `address`) of job `job_id` whose ring is now at
/// `ring_version` (its `reroute` named the node; 0: a reconnect to a node of the job,
/// whose welcome need only name it): hello with the token proved, the welcome checked,
/// then attach to the node's other endpoints. Called on the thread
/// that polls `ep`; frames and closes on the endpoint's other connections go to
/// `others` meanwhile. Throws rw::error; its connections are closed then.
joined_node join_node(transports::tcp::endpoint& ep, const join_request& req,
                      const std::string& address, const std::string& node,
                      uint32_t job_id, uint64_t ring_version,
                      transports::frame_sink& others);

/// A chunk's home node, sending each step's summed gradient to the chunk's replica
/// node (actors/links/mirror_link): connects to `address` and says hello as
/// protocol::mirror_rank of job `req.job` (Hello.mirror), proving `req.token`; returns
/// the connection once welcomed. Called on the thread that polls `ep`; frames and
/// closes on its other connections go to `others` meanwhile. Throws rw::error.
transports::connection_ptr join_as_mirror(transports::tcp::endpoint& ep,
                                          const join_request& req,
                                          const std::string& address,
                                          transports::frame_sink& others);

} // namespace rw::actors
