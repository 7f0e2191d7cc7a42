@0xc7e2a9d14b3f5a60;
# Control messages that leave the actor system: the payloads of hello, welcome, error,
# challenge, proof and located frames.

$import "/capnp/c++.capnp".namespace("rw::schema");

enum OptimizerKind {
  sum @0;        # the result is the summed gradient itself (plain all-reduce)
  sgd @1;
  momentum @2;
  nesterov @3;
  adam @4;
  lamb @5;
  lars @6;
}

struct Optimizer {
  kind @0 :OptimizerKind;
  learningRate @1 :Float32;
  momentum @2 :Float32;
  beta1 @3 :Float32;
  beta2 @4 :Float32;
  epsilon @5 :Float32;
  weightDecay @6 :Float32;
  rescale @7 :Float32;      # gradient scale applied to the sum (0 = 1 / workers)
  eta @8 :Float32;          # LARS trust coefficient
}

struct TensorSpec {
  name @0 :Text;
  elements @1 :UInt64;      # float32 elements
  hasInit @2 :Bool;         # rank 0 sends initial values; otherwise zeros
}

enum ConsistencyModel {
  bsp @0;
  ssp @1;
  async @2;
}

enum CompressionKind {
  none @0;       # float32 payloads
  bf16 @1;       # pushes carry bfloat16 values (frame flag bf16)
  fp16 @2;       # pushes carry a float32 scale, then IEEE half values (frame flag fp16)
  topk @3;       # pushes are pushSparse frames: each chunk's k largest of gradient +
                 # the worker's residual (k = max(1, ceil(ratio * length)); a chunk of
                 # fewer than 1024 elements: all of it, as a dense push)
}

struct Compression {
  kind @0 :CompressionKind;
  ratio @1 :Float32;        # topk: the fraction of each chunk's elements sent, (0, 1]
  updates @2 :Bool;         # bf16 / fp16: the node's updates carry 16-bit values too
  warmup @3 :UInt32;        # topk: the job's first `warmup` steps send more (four equal
                            # stages at 1/4, 1/16, 1/64, 1/256, never below ratio)
}

struct Hello {
  jobName @0 :Text;
  numWorkers @1 :UInt32;
  rank @2 :UInt32;
  chunkBytes @3 :UInt32;
  optimizer @4 :Optimizer;
  tensors @5 :List(TensorSpec);
  shmSegment @6 :Text;      # a shared memory segment for the data (same host only)
  shmNonce @7 :UInt64;      # stored in the segment: proves it is this worker's
  consistency @8 :ConsistencyModel;
  staleness @9 :UInt32;     # the bound s of ssp
  hasToken @10 :Bool;       # the worker holds the job's token and will prove it
  rack @11 :Text;           # the worker's rack ("": not said); a hierarchical job
                            # placed at join puts it there unless it shares a host
  pickedBy @12 :Text;       # why the worker says hello here ("": it was told to), e.g.
                            # the round trips it measured to the job's aggs
  mirror @13 :Bool;         # not a worker: a node of the job (rank = mirror_rank) that
                            # sends each step's summed gradient of the chunks it homes
                            # to their replica here (replicas = 1); proves the token
  specFromJob @14 :Bool;    # the worker states only jobName (and, for a job whose
                            # tensors nobody has declared yet, tensors): the node takes
                            # the rest from the job it holds (its grant or, once it
                            # runs, its chunks) and sends the whole spec in the welcome;
                            # numWorkers, chunkBytes, optimizer, consistency are unread
  compression @15 :Compression; # how this job's gradients travel (absent: none)
}

# A job's whole spec, as the node serves it (Welcome.job).
struct JobSpec {
  name @0 :Text;
  numWorkers @1 :UInt32;
  chunkBytes @2 :UInt32;
  optimizer @3 :Optimizer;
  tensors @4 :List(TensorSpec);
  consistency @5 :ConsistencyModel;
  staleness @6 :UInt32;
  compression @7 :Compression;
}

struct Challenge {
  nonce @0 :Data;           # 32 random bytes, fresh for this connection
}

struct Proof {
  mac @0 :Data;             # HMAC-SHA-256 keyed by the token over (nonce, job, rank)
}

struct AttachProof {
  # The payload of `attach`: a worker joining the node's further endpoints proves the
  # rank it joined as without sending a secret. mac = HMAC-SHA-256 keyed by the job's
  # token (an open job, which has none: by the welcome's attach token, as 16 hex
  # digits) over ("rackweave attach", NUL, nonce, the attach token as 8 little-endian
  # bytes, the job name, NUL, rank as 4 little-endian bytes). The node takes each
  # nonce once per welcome.
  nonce @0 :Data;           # 32 random bytes, the worker's, fresh for each attach
  mac @1 :Data;
}

struct Located {
  coordinator @0 :Text;     # HOST:PORT of the coordinator's control (middleman) address;
                            # an empty or wildcard HOST means "the host you asked"
  nodeName @1 :Text;        # the node that answered
  role @2 :Text;            # its role (rack-agg, coordinator)
  tenantDoor @3 :Text;      # HOST:PORT of the coordinator's tenant door, where tenants'
                            # shells connect (docs/wire-protocol.md, "The tenant door");
                            # "" when it has none (no --tenants-file); an empty or
                            # wildcard HOST means the coordinator's host
}

# One side of a fabric connection (transports/fabric): its endpoint's address and the
# receive slots it grants the other side. Each slot holds a frame: the 64-byte header,
# then the payload; the writer fills a slot with one RMA write whose 32-bit immediate is
# (connIndex << 12 | slot), and the receiver gives the slot back with a message whose
# immediate is the same pair in the writer's numbering.
struct FabricOffer {
  provider @0 :Text;       # short name: "tcp", "verbs", "efa"
  address @1 :Data;        # fi_getname of the sender's endpoint
  slotsAddress @2 :UInt64; # where slot 0 is, as the provider names it for RMA
  slotsKey @3 :UInt64;     # the key of the slots' registration
  slotBytes @4 :UInt32;    # each slot's size, header included
  slotCount @5 :UInt32;    # at most 4096
  connIndex @6 :UInt32;    # the sender's index of this connection (< 2^19)
  creditBatch @7 :UInt32;  # slots the sender takes back in one credit message: 0 or 1,
                           # one per message (its immediate names the slot); n > 1, up
                           # to n (the immediate names the first, the payload the rest
                           # as little-endian 16-bit slot numbers)
  frameNotices @8 :Bool;   # the sender announces each frame with a notice message after
                           # the write, and acts only on notices and credits from its
                           # peer (docs/wire-protocol.md); false (an older build, frames
                           # announced by the write's immediate) is refused
}

# Where a worker wants a tensor's results (frame kind `place`, fabric only): chunk c of
# an update for `tensor` (not a subscription's) is written straight to
# `address + c * chunkBytes` under `key`, its frame header still into a slot (flagged
# placed). A worker sends it when an operation's output buffer is not the one it last
# named for that tensor.
struct FabricPlace {
  tensor @0 :UInt32;
  address @1 :UInt64;    # the output buffer's start, as the provider names it for RMA
  key @2 :UInt64;        # its registration's key (remote write)
  bytes @3 :UInt64;      # its length: nothing is written outside it
  chunkBytes @4 :UInt32; # the job's full chunk, in bytes
}

struct ShardEndpoints {
  endpoints @0 :List(UInt32); # indexes into Welcome.endpoints that serve this shard
}

struct Welcome {
  jobId @0 :UInt32;
  nodeName @1 :Text;
  created @2 :Bool;         # this hello created the job
  endpoints @3 :List(Text); # HOST:PORT of every endpoint of the node
  endpointIndex @4 :UInt32; # which of them this connection is
  numShards @5 :UInt32;     # with shardEndpoints: the routing table (runtime/chunking)
  shardEndpoints @6 :List(ShardEndpoints);
  token @7 :UInt64;         # this welcome's attach token: what the proof of each attach to
                            # the node's other endpoints is bound to (AttachProof)
  shm @8 :Bool;             # the node took the worker's shared memory segment
  shmBell @9 :Text;         # no longer sent (was a name any process of the user could
  shmParams @10 :Text;      # open): the doorbell and parameters come by shmHandover
  # A job on several nodes (flat mode): every node of the job, in ring order, with
  # the address a worker says hello to; the worker joins each and sends every chunk to
  # its home (runtime/ring over jobNodeNames with ringVnodes points per node). Empty
  # (or one entry): the job lives on this node alone.
  jobNodes @11 :List(Text);     # HOST:PORT of each node
  jobNodeNames @12 :List(Text); # the names the ring hashes
  nodeIndex @13 :UInt32;        # which of them this node is
  ringVnodes @14 :UInt32;
  ringVersion @15 :UInt64;
  # The clock this rank goes on from: the lowest clock of its pushes that some chunk on
  # this node has not counted. 0 for a new job; a restored job's checkpoint clock; for a
  # rank that joins again (a restarted worker), its first step not counted everywhere.
  # Pushes it repeats below a chunk's own count are dropped as duplicates and answered
  # as the first were (ack, or the update).
  resumeClock @16 :UInt64;
  # Replicas of each chunk (0 or 1): with 1, every chunk is also served by its replica
  # node (the next other node on the ring), to which the worker sends each push and
  # init as well; only the home answers. When a node dies the job goes on: the
  # worker waits for a `reroute` (it does not fail on that node's connections closing).
  replicas @17 :UInt32;
  # The job's spec as this node serves it: what a worker that stated none (specFromJob)
  # works with (its tensors, chunk size, workers). Empty name on an attach's welcome.
  job @18 :JobSpec;
  # The libfabric provider this node's fabric endpoint runs ("tcp", "verbs", "efa"; ""
  # none, or not for this job): a worker that can open the same provider may send a
  # `fabric` frame with its FabricOffer.
  fabric @19 :Text;
  # With shm: where and how the worker collects the node's doorbell segment and, when
  # the node shares them read-only, the job's parameters, as file descriptors over a
  # unix socket (docs/wire-protocol.md, "Shared memory handover"). shmHandover is the
  # socket's abstract name ("@NAME"); shmTicket, 32 random bytes, is good for one
  # collection within 30 s.
  shmHandover @20 :Text;
  shmTicket @21 :Data;
}

struct ErrorInfo {
  code @0 :UInt16;
  message @1 :Text;
  # With code `moved`: the nodes the worker may say hello to instead (HOST:PORT). One:
  # go there. Several: the node could not tell which is nearest; the worker measures
  # the round trip to each and says hello at the lowest. Empty: the message's first
  # word is the address (older nodes).
  candidates @2 :List(Text);
}

# Worker (rank 0) to node (frame kind 19, `hyper`): change the job's optimizer
# hyper-parameters for the step of clock atClock and every later one, on every chunk
# and node of the job (rw.job_set). Bit i of `present` says field i is given: lr,
# momentum, weightDecay, beta1, beta2.
struct HyperChange {
  atClock @0 :UInt64;
  present @1 :UInt8;
  lr @2 :Float32;
  momentum @3 :Float32;
  weightDecay @4 :Float32;
  beta1 @5 :Float32;
  beta2 @6 :Float32;
}

# Node to worker (frame kind 18, `reroute`): the job's nodes changed while it runs (a
# node was drained: its chunks moved, with their state, to their homes on the new
# ring). The worker routes every chunk by the ring of `nodes` (names, in ring order; a
# subset of the nodes it joined) at `ringVersion`, stops using the connections to nodes
# no longer listed, and sends again every request still unanswered whose chunk is now
# homed on the node that sent this frame. Every node of the job sends one. With
# `keptPushes` (a takeover: the node's chunks stayed, and pushes routed by the old ring
# were counted, not dropped) only the requests whose chunk's home changed are sent again.
struct Reroute {
  ringVersion @0 :UInt64;
  nodes @1 :List(Text);
  replicas @2 :UInt32;  # replicas of each chunk on the new ring (0 after a takeover)
  addresses @3 :List(Text);  # each node's worker address (HOST:PORT), as `nodes`: a
                             # worker says hello to a node it has no connection to yet
  keptPushes @4 :Bool;       # the sender counted every push the old ring routed to it
                             # (a takeover): what it was sent need not come again
}
