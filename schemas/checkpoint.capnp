@0xd7a4c2b19e3f5a60;
# Checkpoints: a directory with one chunk file per node that wrote one and a manifest
# that names them (runtime/checkpoint/). A file is one unpacked Cap'n Proto message;
# the manifest holds each chunk file's size and xxh64, so a torn or altered file is
# found before anything is read from it. No manifest: not a checkpoint.

# Its own C++ namespace: control.capnp has a struct Optimizer too, and two classes of
# one name are an ODR violation (clang -O1 linked the wrong one; tests/sanitize.sh).
$import "/capnp/c++.capnp".namespace("rw::schema::ckpt");

# One chunk's state between two BSP steps.
struct ChunkRecord {
  tensor @0 :UInt32;
  chunk @1 :UInt32;
  version @2 :UInt64;     # updates applied: the checkpoint's clock
  params @3 :Data;        # float32, little endian, the chunk's length
  m @4 :Data;             # the optimizer's first array (momentum, Adam's m); empty if none
  v @5 :Data;             # Adam's v; empty if none
}

# What one node wrote: the chunks it homed at the checkpoint's clock.
struct ChunkFile {
  job @0 :Text;
  clock @1 :UInt64;
  node @2 :Text;
  chunks @3 :List(ChunkRecord);
}

struct ChunkId {
  tensor @0 :UInt32;
  chunk @1 :UInt32;
}

struct FileEntry {
  name @0 :Text;          # relative to the checkpoint directory
  bytes @1 :UInt64;
  xxh64 @2 :UInt64;       # of the whole file, seed 0
  chunks @3 :List(ChunkId);
}

struct Tensor {
  name @0 :Text;
  elements @1 :UInt64;
  hasInit @2 :Bool;
}

struct Optimizer {
  kind @0 :Text;
  learningRate @1 :Float32;
  momentum @2 :Float32;
  beta1 @3 :Float32;
  beta2 @4 :Float32;
  epsilon @5 :Float32;
  weightDecay @6 :Float32;
  rescale @7 :Float32;
  eta @8 :Float32;
}

# A hyper-parameter change (rw.job_set) the job had made: bit i of `present` says field
# i is given (lr, momentum, weightDecay, beta1, beta2).
struct ScheduledChange {
  atClock @0 :UInt64;
  present @1 :UInt8;
  lr @2 :Float32;
  momentum @3 :Float32;
  weightDecay @4 :Float32;
  beta1 @5 :Float32;
  beta2 @6 :Float32;
}

struct Manifest {
  format @0 :UInt32;      # 1
  job @1 :Text;
  workers @2 :UInt32;
  chunkBytes @3 :UInt32;
  consistency @4 :Text;
  optimizer @5 :Optimizer;
  tensors @6 :List(Tensor);
  clock @7 :UInt64;
  files @8 :List(FileEntry);
  schedule @9 :List(ScheduledChange); # in the order made; a restored job goes on with it
  compression @10 :Text;  # how gradients travel ("none", "bf16", "fp16", "topk:R");
                          # empty (older checkpoints): none
  compressUpdates @11 :Bool;
}
