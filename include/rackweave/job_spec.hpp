#pragma once
// What a job is: its workers, tensors, chunk size and server-side optimizer. The first
// worker's spec creates the job on the node; every later worker must send the same.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rackweave/defaults.hpp"

namespace rw {

enum class optimizer_kind : uint8_t {
  sum,      // the result is the plain sum of the workers' gradients (all-reduce)
  sgd,      // p -= lr * g
  momentum, // m = mu * m + g;  p -= lr * m
  nesterov, // m = mu * m + g;  p -= lr * (g + mu * m)
  adam,     // bias-corrected Adam
  lamb, // Adam's direction (+ weight decay) scaled by ||w|| / ||direction|| of the tensor
  lars, // momentum SGD scaled by eta ||w|| / (||g|| + wd ||w||) of the tensor
};

const char* to_string(optimizer_kind kind) noexcept;
std::optional<optimizer_kind> parse_optimizer_kind(std::string_view name);

struct optimizer_spec {
  optimizer_kind kind = optimizer_kind::sum;
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  /// Factor applied to the summed gradient before the step; 0 means 1 / workers.
  float rescale = 0.0f;
  /// LARS trust coefficient.
  float eta = 0.001f;
};

/// When a worker's update is applied and when it is answered.
struct consistency_spec {
  enum model_t : uint8_t {
    bsp,   // a chunk's step for clock c runs once every worker pushed clock c (exact)
    ssp,   // applied on arrival; a worker at clock c is answered once the slowest
           // worker has pushed at least c + 1 - staleness times
    async, // applied on arrival, answered at once
  } model = bsp;
  uint32_t staleness = 0; // ssp only
};

/// "bsp", "ssp:S" (S >= 0) or "async". Throws std::invalid_argument saying what is wrong.
consistency_spec parse_consistency(std::string_view text);
std::string to_string(const consistency_spec& c);

/// How a job's gradients travel to the node, whatever the transport and reduction
/// ("none", "bf16", "fp16" or "topk:RATIO"; rw.job_create{compression = ...}). The node
/// widens what it receives and sums in float32, so aggregation and the optimizer stay
/// float32 and the node's parameters (its master copy) exact. Every mode is
/// deterministic: a worker rounds and selects by runtime/compression.hpp, which a
/// single-process reference applies the same way.
struct compression_spec {
  enum kind_t : uint8_t {
    none, // float32
    bf16, // bfloat16, rounded to nearest even (float32 subnormals flush to zero)
    fp16, // IEEE half, rounded to nearest even, with a power-of-two scale per chunk so
          // small gradients do not underflow
    topk, // per chunk the k = ceil(ratio * length) largest of gradient + residual, as
          // sparse pairs; the worker keeps the rest as its residual for the next step
          // (error feedback, as in Deep Gradient Compression). A chunk of fewer than
          // runtime::topk_dense_below elements (a bias, a small layer) is sent whole.
  } kind = none;
  float ratio = 0.0f; // topk: the fraction of each chunk's elements sent, in (0, 1]
  /// topk: the job's first `warmup` steps send more, as Deep Gradient Compression's
  /// warm-up does: four equal stages at 1/4, 1/16, 1/64 and 1/256 of each chunk (never
  /// less than `ratio`), then `ratio` ("topk:0.01,warmup=40"). 0: no warm-up.
  uint32_t warmup = 0;
  /// bf16 / fp16: results (updates and pulls) travel back as 16-bit values of the same
  /// format too (rw.job_create{compress_updates = true}); the node keeps float32.
  bool updates = false;
};

/// "none", "bf16", "fp16", "topk:R" (0 < R <= 1) or "topk:R,warmup=N" (N steps, at most
/// 2^31). Throws std::invalid_argument saying what is wrong.
compression_spec parse_compression(std::string_view text);
/// "bf16", "topk:0.01", "topk:0.01,warmup=40", ... (without `updates`).
std::string to_string(const compression_spec& c);

struct tensor_spec {
  std::string name;
  uint64_t elements = 0; // float32 elements
  bool has_init = false; // rank 0 supplies initial values; otherwise zeros
};

/// A change of the optimizer's hyper-parameters from a clock on: every field given
/// replaces the job's for the step of clock `at_clock` (the one that makes version
/// at_clock + 1) and every later one, for every chunk of the job
/// (rw.job_set{name, lr = ..., at_clock = ...}; Python rackweave.set_hyper).
struct hyper_change {
  uint64_t at_clock = 0;
  std::optional<float> learning_rate;
  std::optional<float> momentum;
  std::optional<float> weight_decay;
  std::optional<float> beta1;
  std::optional<float> beta2;
};

/// Returns an empty string when `change` is valid on its own (at least one field; each
/// finite, lr and weight decay >= 0, momentum and betas in [0, 1)), else what is wrong.
std::string validate(const hyper_change& change);

/// "lr=0.01 momentum=0.9 at clock 30": what the change sets.
std::string describe(const hyper_change& change);

struct job_spec {
  std::string name;
  uint32_t num_workers = 1;
  uint32_t chunk_bytes = defaults::chunk_bytes;
  optimizer_spec optimizer; // as created: the hyper-parameters of clock 0
  std::vector<tensor_spec> tensors;
  consistency_spec consistency;
  compression_spec compression;
  /// Hyper-parameter changes made since, in the order they were made (not compared
  /// between specs: a worker states the job as created).
  std::vector<hyper_change> schedule;
};

/// The optimizer the step of clock `clock` runs: `spec.optimizer` with every change of
/// the schedule whose at_clock <= clock applied, by at_clock, then in the order made.
optimizer_spec optimizer_at(const job_spec& spec, uint64_t clock);

/// Returns an empty string when `spec` is valid on its own, else what is wrong.
std::string validate(const job_spec& spec, uint32_t max_chunk_bytes,
                     uint32_t max_workers);

/// Returns an empty string when both specs describe the same job, else the first
/// difference, phrased for the worker that sent `theirs`.
std::string describe_mismatch(const job_spec& ours, const job_spec& theirs);

} // namespace rw
