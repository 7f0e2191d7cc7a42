#pragma once
// What the chunk shard's logic (actors/shard/core.hpp) talks to, as interfaces with no
// actor in them, so that the logic runs and is tested without an actor system:
//   shard_outbox    the shard's own mailbox: whether anything waits, and the tokens it
//                   sends itself (chunk_shard.cpp sends them as messages)
//   shard_peers     the node's other shards, by index: a layer-wise step's norms and
//                   trust ratio (chunk_shard.cpp: messages to their actors)
//   job_reports     a job's node coordinator: a step timed out, a periodic
//                   checkpoint's copies, the job's clock on this shard
//   snapshot_reply  the answer to a request that waits for chunks to reach a clock (a
//                   checkpoint, a move's fence): a response promise in the actor
//   chunk_relay     a hierarchical job's uplink (actors/links/rack_uplink)
//   chunk_mirror    a replicated job's link to its replicas (actors/links/mirror_link)

#include <cstdint>
#include <memory>
#include <string>

#include "actors/shard/requests.hpp"
#include "rackweave/errc.hpp"

namespace rw::actors {

class shard_outbox {
public:
  virtual ~shard_outbox() = default;
  /// Whether no other request waits for the shard now.
  virtual bool idle() = 0;
  /// A work token (serve the backlog's lowest clocks) behind what waits now.
  virtual void work_later() = 0;
  /// A flush token (send the replica acks held) behind what waits now.
  virtual void flush_later() = 0;
};

class shard_peers {
public:
  virtual ~shard_peers() = default;
  virtual size_t size() const = 0;
  /// Chunk `chunk`'s share of a tensor's norms, to the tensor's home shard `to`.
  virtual void norm(uint32_t to, uint32_t job_id, uint32_t tensor, uint64_t version,
                    uint32_t chunk, double w2, double d2) const = 0;
  /// The tensor's trust ratio, to shard `to`, which holds some of its chunks.
  virtual void trust(uint32_t to, uint32_t job_id, uint32_t tensor, uint64_t version,
                     float trust) const = 0;
};

class job_reports {
public:
  virtual ~job_reports() = default;
  /// The job cannot go on (a step waited past the step timeout, or a restarted shard
  /// lost its state): the coordinator fails it everywhere.
  virtual void failed(uint32_t job_id, errc code, const std::string& why) = 0;
  /// Every chunk of the job here, copied right after its step to `clock`.
  virtual void checkpointed(uint32_t job_id, uint64_t clock, chunk_snapshot snap) = 0;
  /// The job's chunks here have completed `clock` steps.
  virtual void stepped(uint32_t job_id, uint32_t shard, uint64_t clock) = 0;
};

class snapshot_reply {
public:
  virtual ~snapshot_reply() = default;
  virtual void deliver(chunk_snapshot snap) = 0;
  virtual void fail(errc code, const std::string& why) = 0;
};
using snapshot_reply_ptr = std::shared_ptr<snapshot_reply>;

class chunk_relay {
public:
  virtual ~chunk_relay() = default;
  /// The rack's partial sum of step `clock` (the chunk's d), to the chunk's home; its
  /// answer comes back as a relay_update.
  virtual void push(uint32_t tensor, uint32_t chunk, uint64_t clock, float* partial) = 0;
  /// Rank 0's initial values, to the chunk's home and the other racks.
  virtual void init(uint32_t tensor, uint32_t chunk, const float* values) = 0;
};

class chunk_mirror {
public:
  virtual ~chunk_mirror() = default;
  /// The sum of step `clock` of a chunk homed on shard `shard`, to its replica on node
  /// `node` of ring `ring`; its ack comes back as (mirror_atom, ...).
  virtual void send(uint32_t shard, uint32_t tensor, uint32_t chunk, uint64_t clock,
                    uint64_t ring, uint32_t node, const float* sum, uint32_t length) = 0;
  /// The chunk's sum waits for no replica any more.
  virtual void cancel(uint32_t tensor, uint32_t chunk) = 0;
};

} // namespace rw::actors
