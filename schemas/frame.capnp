@0xb5c1d3a2e4f60718;
# The data-plane frame header. Every frame on a RackWeave transport is this header,
# serialised as an unpacked single-segment Cap'n Proto message, followed by
# `payloadBytes` of payload. The struct holds only fixed-width fields, so its encoded
# size never changes (see protocol/frame.hpp: frame_header_bytes).

$import "/capnp/c++.capnp".namespace("rw::schema");

enum FrameKind {
  invalid @0;
  hello @1;      # worker -> node: payload is a control.capnp Hello
  welcome @2;    # node -> worker: payload is a control.capnp Welcome
  push @3;       # worker -> node: gradient chunk (float32 payload) for `clock`
  pull @4;       # worker -> node: ask for chunk at version >= `clock`; no payload
  update @5;     # node -> worker: chunk parameters at version `clock` (float32 payload)
  ack @6;        # node -> worker: a push (without result) was counted
  init @7;       # worker (rank 0) -> node: initial chunk values (version 0)
  error @8;      # either way: payload is a control.capnp ErrorInfo
  bye @9;        # worker -> node: graceful leave
  attach @10;    # worker -> node, on each further endpoint: join as (jobId, rank); the
                 # payload is a control.capnp AttachProof; answered with a welcome or
                 # an error (unauthorized)
  pushSparse @11; # worker -> node: like push, payload (UInt32 index in chunk, Float32
                  # value) pairs, 8 bytes each; absent indices count as zero
  challenge @12; # node -> worker, after a hello with hasToken: payload is a control.capnp
                 # Challenge; the worker answers with a proof
  proof @13;     # worker -> node: payload is a control.capnp Proof; answered with a
                 # welcome or an error (unauthorized)
  locate @14;    # anyone -> node: where is the cluster coordinator? no payload
  located @15;   # node -> asker: payload is a control.capnp Located
  probe @16;     # node -> node: rate probe; payload (at most 256 KiB) is discarded. With
                 # flags bit 0 the receiver answers an ack whose `clock` is the probe
                 # bytes it took on this connection (at most 16 MiB per connection)
  resend @17;    # node -> worker: shard `chunkIndex` of this node was restarted (with its
                 # chunks' state) and requests queued for it may have died with it: the
                 # worker re-sends every request of job `jobId` still unanswered for
                 # chunks that shard serves. A re-sent push it had counted is dropped
                 # and answered as the first was; a repeated answer is ignored. No payload.
  reroute @18;   # node -> worker: the job's nodes changed (payload: control.capnp Reroute):
                 # route by the new ring, send again what is unanswered
  hyper @19;     # worker (rank 0) -> node: change the job's hyper-parameters from a clock
                 # on (payload: control.capnp HyperChange); node -> worker: the answer
                 # (`clock`: the clock the job had reached; refused: errorCode and an
                 # ErrorInfo payload)
  fabric @20;    # worker -> node, on its joined TCP connection (after the welcome), and
                 # the node's answer: payload is a control.capnp FabricOffer. From then on
                 # the worker's frames travel as RMA writes into the slots the other side
                 # offered (transports/fabric); the TCP connection stays for liveness
  place @21;     # worker -> node over a fabric connection only: where the results of a
                 # tensor (`tensorId`) go (payload: control.capnp FabricPlace). Updates
                 # are then written straight into that memory and their header, flagged
                 # `placed` (16), into a slot. The fabric transport consumes it: the
                 # node's actors never see it
  state @22;     # worker -> node: read one optimizer array (`staleness`: 0 = m, 1 = v;
                 # 0xFFFFFFFF: none, the version only) of a chunk of a BSP job, between
                 # steps; the node answers with a `state` frame (`clock` = the chunk's
                 # version, payload the array as float32). With flags bit 7 (128) rank 0
                 # loads the array from the payload into a chunk at version 0 (or at
                 # `clock`), or with 0xFFFFFFFF and no payload sets its version to
                 # `clock`; the answer carries no payload. A refusal is an `error`
                 # frame about the request (its header's tensor, chunk and staleness)
}

struct FrameHeader {
  magic @0 :UInt32;         # 0x52574631 ("RWF1")
  version @1 :UInt16;       # wire protocol version
  kind @2 :FrameKind;
  flags @3 :UInt16;         # bit 0: push wants the updated chunk back (push_pull)
                            # bit 1: pull wants the chunk only if newer than `clock`;
                            #        an unchanged chunk is answered with an ack
                            # bit 2: pull subscribes: every new version of the chunk
                            #        is sent (update with bit 2) until disconnect
                            # bit 3: ack from a chunk's replica (protocol/frame.hpp)
                            # bit 4: fabric only: update payload placed in memory
                            # bit 5: push/update payload is bfloat16 values (2 bytes
                            #        each, little-endian) of a job with compression bf16
                            # bit 6: push/update payload is a Float32 scale (a power of
                            #        two), then IEEE half values: value = half * scale
                            #        (compression fp16)
  errorCode @4 :UInt16;     # for kind = error: rw::errc
  jobId @5 :UInt32;
  rank @6 :UInt32;
  tensorId @7 :UInt32;
  chunkIndex @8 :UInt32;
  payloadBytes @9 :UInt32;
  clock @10 :UInt64;        # push: the worker's clock; pull/update: version
  staleness @11 :UInt32;    # update: how many clocks the slowest worker's pushes
                            # included in it are behind the reader's (0 under bsp)
  ring @12 :UInt32;         # push, init (a job on several nodes): the ring version the
                            # worker routed it by; a node whose job is on a newer ring
                            # drops it unanswered (the worker sends it again by the new
                            # ring after the `reroute`). 0: not stamped (one node)
}
