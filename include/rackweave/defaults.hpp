#pragma once
// Every default RackWeave uses, in one place (CAF's defaults.hpp idea).

#include <cstddef>
#include <cstdint>

namespace rw::defaults {

/// Bytes per chunk: the unit of routing, aggregation and update. 256 KiB: on a 16-core
/// host 32 KiB chunks cost W = 8 x 64 MiB over TCP 88 ms against 63 ms (with the push
/// window below), the per-chunk work of the node and the worker (bench/RESULTS.md,
/// scale); a small tensor is still one chunk of its own size.
constexpr uint32_t chunk_bytes = 256 * 1024;
/// Largest chunk a node accepts (also the size of its largest pooled buffer).
constexpr uint32_t max_chunk_bytes = 4 * 1024 * 1024;
/// Largest control payload (hello, welcome, error) a peer may send.
constexpr uint32_t max_control_bytes = 1024 * 1024;
/// Largest job a node accepts.
constexpr uint32_t max_workers = 1024;
/// Where rw-node listens when nothing else is said.
constexpr const char* listen = "127.0.0.1:7700";
/// How long an open BSP step may wait for its missing workers before the job fails.
constexpr uint32_t step_timeout_ms = 60'000;
/// How long an open BSP step may wait before the node names the ranks and chunks it
/// waits for (once per step, in the log and in job status).
constexpr uint32_t slow_step_ms = 1'000;
/// How long a rank whose worker disconnected without bye may take to join again (a
/// restarted process, same rank) before its job fails; its steps wait meanwhile.
constexpr uint32_t rejoin_timeout_ms = 15'000;
/// A worker's push window over TCP: how far its pushes of one push_pull may run ahead
/// of the chunks already answered (bytes; 0: no window). A worker that got ahead of the
/// others, whose pushes of the same chunks its answers wait for, then leaves the shared
/// links to them (bench/RESULTS.md, rack-bound). Raise it for links whose bandwidth-delay
/// product exceeds it. The default, push_window_auto, is push_window_chunks of the
/// job's chunks and at least push_window_min_bytes: 4 MiB with 256 KiB chunks, 512 KiB
/// with 32 KiB ones (on a 16-core host, 16 chunks in flight instead of 4 took W = 14 x
/// 64 MiB from 128 to 101 ms).
constexpr uint64_t push_window_auto = UINT64_MAX;
constexpr uint64_t push_window_bytes = push_window_auto;
constexpr uint64_t push_window_chunks = 16;
constexpr uint64_t push_window_min_bytes = 512 * 1024;
/// A connection that has not joined a job (a stranger: it has proven nothing) sends
/// each frame whole within this long of its first byte, and is not idle this long
/// (connecting counts as its start) unless its hello is being decided: a client that
/// connects and says nothing, trickles a frame, or locates and then waits, holds a
/// connection no longer.
constexpr uint32_t first_frame_ms = 10'000;
/// Strangers per endpoint (accepted connections that have not joined a job and are not
/// waiting for the node's answer to their hello): past this, a new one is closed at
/// once (the served connections are not at stake).
constexpr uint32_t max_stranger_connections = 256;
/// Of those, what one host (IP address; every loopback address is one host) may hold:
/// past this its next stranger is closed at once, so one host cannot keep every other
/// host's workers out.
constexpr uint32_t max_peer_strangers = 128;
/// What a node holds, over all its endpoints, for payloads of connections that have
/// not joined a job (hello, proof, attach: taken as the bytes arrive); a frame that
/// would pass it closes its connection (errc::unavailable).
constexpr uint32_t max_unjoined_mib = 8;
/// A peer that has not joined a job and had this many frames refused is closed.
constexpr uint32_t max_stranger_refusals = 4;
/// `locate` answers one connection that has not joined a job gets (one at a time): a
/// client that pipelines locates and reads none makes the node queue no more.
constexpr uint32_t max_stranger_locates = 4;
/// The tenant door (actors/door/tenant_door.hpp): a connection finishes its handshake
/// within this long of connecting, or is closed.
constexpr uint32_t door_handshake_ms = 5'000;
/// Connections to the tenant door that have not finished the handshake, in all and
/// from one host; past these a new one is closed at once.
constexpr uint32_t door_max_strangers = 256;
constexpr uint32_t door_max_strangers_per_host = 16;
/// Open tenant sessions at once (a shell holds one; the Python calls one per call).
constexpr uint32_t door_max_sessions = 1024;
/// An open session that asks nothing for this long is closed (the shell opens a new
/// one at its next request).
constexpr uint32_t door_idle_ms = 300'000;
/// How long the door waits for the coordinator's answer to a tenant's request.
constexpr uint32_t door_request_timeout_ms = 60'000;
/// A peer that has not joined a job holds its connection at most this many times
/// first_frame_ms in all, however often it sends (its idle time restarts with each
/// frame); time spent waiting for the node's answer to its hello is not counted.
constexpr uint32_t stranger_lifetimes = 3;
/// How long a peer may take none of the bytes sent to it before its connection is
/// closed (a worker's own sends block at most this long; a node's are queued).
constexpr uint32_t io_timeout_ms = 10'000;
/// Connections one host may hold to one of a node's endpoints (a host's workers need
/// one per job and endpoint); more are refused.
constexpr uint32_t max_peer_connections = 1024;
/// Jobs one host may have created, and still live, on an --open-jobs node.
constexpr uint32_t max_open_jobs_per_peer = 16;
/// Pulls one connection may have waiting on one chunk (for a version still to come);
/// more are refused (errc::too_many_requests). A worker has one at a time per tensor.
constexpr uint32_t max_waiting_pulls = 16;
/// What a node may hold queued for one peer whose socket does not take it at once
/// (the copy made only when a peer reads slower than the node writes); past this the
/// peer is cut off. Above a BSP step's updates to one worker for jobs up to this size.
constexpr uint64_t send_queue_mib = 256;
/// How long a worker waits for any reply (welcome, update, ack) before failing.
constexpr uint32_t request_timeout_ms = 120'000;
/// How long a worker keeps saying hello again to a node whose connections closed under
/// it (a cut link, a node that closed them) before the loss is the job's; well inside
/// the node's rejoin_timeout_ms. A refused connect (nobody listens: the node is gone)
/// gives up at once.
constexpr uint32_t reconnect_window_ms = 10'000;
/// How often shards look for steps that have waited too long.
constexpr uint32_t timeout_scan_ms = 250;
/// How long a node waits for its shards to set up a new job's chunks (allocating and
/// zeroing its memory) before it fails the job: well below a poller's wait for the
/// admission, so the worker hears why and the job's name is free again.
constexpr uint32_t shard_setup_timeout_ms = 20'000;
/// In-node balancing (rw-node --balance): how often the node compares its shards' busy
/// time, how much busier the busiest must be than the least busy shard of its NUMA
/// domain, and for how many comparisons in a row, before chunks move between them.
constexpr uint32_t balance_ms = 1'000;
constexpr double balance_ratio = 1.25;
constexpr uint32_t balance_windows = 3;
/// How long a NIC poller blocks in epoll when its mailbox is empty.
constexpr int poll_block_ms = 2;
/// Protocol magic ("RWF1") and version carried by every frame header.
constexpr uint32_t frame_magic = 0x52574631;
constexpr uint16_t wire_version = 3;
/// A node whose heartbeats stop for this long has left the cluster.
constexpr uint32_t node_timeout_ms = 5'000;
/// How often a node's cluster link sends a heartbeat.
constexpr uint32_t heartbeat_ms = 1'000;
/// How long the cluster coordinator waits for a node's answer.
constexpr uint32_t node_request_timeout_ms = 3'000;
/// How long the shell waits for the coordinator's answer.
constexpr uint32_t shell_timeout_ms = 10'000;
/// A hierarchical job placed at join starts once every rank has said hello: how long
/// after the first hello the others may take (per job: job_create's join_timeout_ms,
/// at most max_join_timeout_ms).
constexpr uint32_t join_timeout_ms = 20'000;
constexpr uint32_t max_join_timeout_ms = 600'000;
/// A worker told to pick the nearest of several nodes times a TCP connect to each this
/// many times (the lowest counts), each connect bounded by rtt_probe_timeout_ms.
constexpr uint32_t rtt_probes = 3;
constexpr uint32_t rtt_probe_timeout_ms = 1'000;
/// Points each node takes on a job's consistent-hash ring (runtime/ring).
constexpr uint32_t ring_vnodes = 128;
/// The rate probe (`reduction = "auto"` where a node's core rate is not configured):
/// one node sends another's --listen endpoint a burst of `probe` frames, at most this
/// many bytes and for at most this long, then asks how much arrived.
constexpr uint32_t probe_bytes = 8 * 1024 * 1024;
constexpr uint32_t probe_burst_ms = 50;
/// Largest payload of one probe frame; a node refuses larger ones.
constexpr uint32_t probe_frame_bytes = 256 * 1024;
/// Most probe bytes a node takes on one connection (the rest is refused and the
/// connection closed), and most probe connections one endpoint serves at once.
constexpr uint32_t probe_max_bytes = 2 * probe_bytes;
constexpr uint32_t probe_max_connections = 4;
/// How long one probe may take, connecting and the answer included; the coordinator
/// waits this long plus node_request_timeout_ms for the node to report it.
constexpr uint32_t probe_timeout_ms = 1'500;
/// How long a node lets one rate probe's connection last (its frames and the answer):
/// past it the connection is closed and its probe slot is free again.
constexpr uint32_t probe_max_ms = 5'000;
/// How long a probed rate between two nodes is reused before probing again, and how
/// long a failed probe is remembered before it is tried again.
constexpr uint32_t probe_cache_ms = 60'000;
constexpr uint32_t probe_retry_ms = 10'000;
/// Hyper-parameter changes (rw.job_set, a worker's `hyper` frame): one at a time per
/// job (another asked meanwhile is refused), each decided within hyper_timeout_ms, and
/// at most max_hyper_changes committed over a job's life (its schedule).
constexpr uint32_t hyper_timeout_ms = 45'000;
constexpr uint32_t max_hyper_changes = 1024;
/// Cache line size for alignment of buffers and per-core counters.
constexpr size_t cache_line = 64;
/// How long a checkpoint may wait for its clock and for every node's file.
constexpr uint32_t checkpoint_timeout_ms = 300'000;
/// Replicas of each chunk of a flat BSP job on several nodes, unless the job says
/// (rw.job_create{replicas = 0 | 1}).
constexpr uint32_t replicas = 1;
/// How long a node told to stop (SIGTERM) waits for its jobs to move off it.
constexpr uint32_t drain_timeout_ms = 120'000;
/// How long a moving job's chunks may take to settle at a clock boundary (a drain);
/// past it the move is given up and the job goes on where it was.
constexpr uint32_t move_settle_timeout_ms = 10'000;
/// The longest one job's move may take at the cluster coordinator, each phase bounded:
/// settle (move_settle_timeout_ms and two node requests), rebuild on the nodes left
/// (shard_setup_timeout_ms and one), reroute (one), and a node request to spare. rw-shell
/// waits this long for each job rw.node_drain or rw.node_join may move, beyond --timeout.
constexpr uint32_t move_timeout_ms = move_settle_timeout_ms + shard_setup_timeout_ms
                                     + 5 * node_request_timeout_ms;
/// Finished jobs whose chunks a shard keeps (newest first), so a checkpoint can still
/// be taken of them; older ones are released.
constexpr size_t kept_finished_jobs = 4;
/// How long a finished job's chunks are kept for such a checkpoint (node option
/// --keep-finished-ms): then they are released and the node's memory comes back.
constexpr uint32_t keep_finished_ms = 60'000;

} // namespace rw::defaults
