#include <cctype>
#include "rackweave/job_spec.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace rw {

const char* to_string(optimizer_kind kind) noexcept {
  switch (kind) {
    case optimizer_kind::sum: return "sum";
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::momentum: return "momentum";
    case optimizer_kind::nesterov: return "nesterov";
    case optimizer_kind::adam: return "adam";
    case optimizer_kind::lamb: return "lamb";
    case optimizer_kind::lars: return "lars";
  }
  return "?";
}

std::optional<optimizer_kind> parse_optimizer_kind(std::string_view name) {
  for (auto k : {optimizer_kind::sum, optimizer_kind::sgd, optimizer_kind::momentum,
                 optimizer_kind::nesterov, optimizer_kind::adam, optimizer_kind::lamb,
                 optimizer_kind::lars})
    if (name == to_string(k))
      return k;
  return std::nullopt;
}

consistency_spec parse_consistency(std::string_view text) {
  consistency_spec c;
  if (text == "bsp")
    return c;
  if (text == "async") {
    c.model = consistency_spec::async;
    return c;
  }
  if (text.substr(0, 4) == "ssp:") {
    auto num = std::string(text.substr(4));
    bool digits = !num.empty() && num.size() <= 9
                  && num.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw std::invalid_argument(fmt::format(
        "'{}': the staleness bound after ssp: must be a whole number >= 0 (ssp:2)",
        text));
    c.model = consistency_spec::ssp;
    c.staleness = static_cast<uint32_t>(std::stoul(num));
    return c;
  }
  throw std::invalid_argument(
    fmt::format("'{}' is not a consistency model (bsp, ssp:S or async)", text));
}

std::string to_string(const consistency_spec& c) {
  switch (c.model) {
    case consistency_spec::bsp: return "bsp";
    case consistency_spec::ssp: return fmt::format("ssp:{}", c.staleness);
    case consistency_spec::async: return "async";
  }
  return "?";
}

compression_spec parse_compression(std::string_view text) {
  compression_spec c;
  if (text == "none")
    return c;
  if (text == "bf16" || text == "fp16") {
    c.kind = text == "bf16" ? compression_spec::bf16 : compression_spec::fp16;
    return c;
  }
  if (text.substr(0, 5) == "topk:") {
    auto rest = text.substr(5);
    auto comma = rest.find(',');
    if (comma != std::string_view::npos) {
      auto option = rest.substr(comma + 1);
      rest = rest.substr(0, comma);
      constexpr std::string_view key = "warmup=";
      auto steps = std::string(option.substr(std::min(option.size(), key.size())));
      size_t used = 0;
      unsigned long long n = 0;
      try {
        if (!steps.empty() && steps[0] >= '0' && steps[0] <= '9')
          n = std::stoull(steps, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (option.substr(0, key.size()) != key || steps.empty() || used != steps.size()
          || n > (1ull << 31))
        throw std::invalid_argument(fmt::format(
          "'{}': after topk:RATIO only ',warmup=STEPS' may follow (0..2^31 steps over "
          "which the ratio falls to RATIO: topk:0.01,warmup=40)",
          text));
      c.warmup = static_cast<uint32_t>(n);
    }
    auto num = std::string(rest);
    size_t used = 0;
    double ratio = 0;
    try {
      ratio = std::stod(num, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (num.empty() || used != num.size() || !(ratio > 0 && ratio <= 1))
      throw std::invalid_argument(fmt::format(
        "'{}': the ratio after topk: must be a number in (0, 1], the fraction of each "
        "chunk sent (topk:0.01)",
        text));
    c.kind = compression_spec::topk;
    c.ratio = static_cast<float>(ratio);
    return c;
  }
  throw std::invalid_argument(fmt::format(
    "'{}' is not a compression (none, bf16, fp16, topk:RATIO or topk:RATIO,warmup=STEPS)",
    text));
}

std::string to_string(const compression_spec& c) {
  switch (c.kind) {
    case compression_spec::none: return "none";
    case compression_spec::bf16: return "bf16";
    case compression_spec::fp16: return "fp16";
    case compression_spec::topk:
      return c.warmup == 0 ? fmt::format("topk:{}", c.ratio)
                           : fmt::format("topk:{},warmup={}", c.ratio, c.warmup);
  }
  return "?";
}

std::string validate(const job_spec& spec, uint32_t max_chunk_bytes,
                     uint32_t max_workers) {
  if (spec.name.empty() || spec.name.size() > 128)
    return "job name must be 1 to 128 characters";
  // Names go into logs, metrics labels, checkpoint paths and shell commands: a safe set.
  auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'
           || c == '-';
  };
  // A hierarchical job's top level, which the rack-aggs join among themselves, is named
  // NAME/top (actors/cluster_messages.hpp): no user's name can be that.
  std::string_view name = spec.name;
  constexpr std::string_view top = "/top";
  if (name.size() > top.size() && name.substr(name.size() - top.size()) == top)
    name.remove_suffix(top.size());
  auto colon = name.find(':');
  bool ok = safe(name[0]) && name[0] != '.' && name[0] != '-'
            && (colon == std::string_view::npos
                || (name.find(':', colon + 1) == std::string_view::npos
                    && colon + 1 < name.size()));
  for (char c : name)
    ok = ok && (safe(c) || c == ':');
  if (!ok)
    return fmt::format(
      "job name '{}' may hold only letters, digits, '.', '_' and '-', "
      "starting with a letter, digit or '_' (a tenant's job: TENANT:NAME)",
      spec.name);
  if (spec.num_workers == 0 || spec.num_workers > max_workers)
    return fmt::format("workers must be 1..{}, got {}", max_workers, spec.num_workers);
  if (spec.chunk_bytes < 4 || spec.chunk_bytes % 4 != 0
      || spec.chunk_bytes > max_chunk_bytes)
    return fmt::format("chunk size must be a multiple of 4 bytes in 4..{}, got {}",
                       max_chunk_bytes, spec.chunk_bytes);
  if (spec.tensors.empty())
    return "a job needs at least one tensor";
  std::set<std::string> names;
  for (auto& t : spec.tensors) {
    if (t.name.empty() || t.name.size() > 256)
      return "tensor names must be 1 to 256 characters";
    if (!names.insert(t.name).second)
      return fmt::format("tensor '{}' is declared twice", t.name);
    if (t.elements == 0 || t.elements > (uint64_t{1} << 34))
      return fmt::format("tensor '{}' must have 1..2^34 elements, got {}", t.name,
                         t.elements);
  }
  // Chunk indexes and counts are 32-bit on the wire and in the node's tables, and every
  // chunk has bookkeeping on its shard: a job has at most 2^24 of them.
  constexpr uint64_t max_chunks = uint64_t{1} << 24;
  uint64_t chunks = 0;
  for (auto& t : spec.tensors)
    chunks += (t.elements + spec.chunk_bytes / 4 - 1) / (spec.chunk_bytes / 4);
  if (chunks > max_chunks)
    return fmt::format("the job's tensors make {} chunks of {} bytes; at most 2^24 "
                       "(16777216) per job: use larger chunks",
                       chunks, spec.chunk_bytes);
  if (spec.consistency.model > consistency_spec::async)
    return "unknown consistency model";
  auto& z = spec.compression;
  if (z.kind > compression_spec::topk)
    return "unknown compression";
  if (z.kind == compression_spec::topk && !(z.ratio > 0 && z.ratio <= 1))
    return fmt::format("topk's ratio must be in (0, 1], got {}", z.ratio);
  if (z.kind != compression_spec::topk && z.ratio != 0)
    return fmt::format("a ratio ({}) belongs to topk only, not {}", z.ratio,
                       to_string(z));
  if (z.warmup != 0 && z.kind != compression_spec::topk)
    return fmt::format("a warm-up ({} steps) belongs to topk only, not {}", z.warmup,
                       to_string(z));
  if (z.warmup > (1u << 31))
    return fmt::format("topk's warm-up is at most 2^31 steps, got {}", z.warmup);
  if (z.updates && z.kind != compression_spec::bf16 && z.kind != compression_spec::fp16)
    return fmt::format(
      "compress_updates needs compression bf16 or fp16 (results travel as "
      "16-bit values), not {}",
      to_string(z));
  auto& o = spec.optimizer;
  auto finite = [](float x) { return std::isfinite(x); };
  if (!finite(o.learning_rate) || !finite(o.momentum) || !finite(o.beta1)
      || !finite(o.beta2) || !finite(o.epsilon) || !finite(o.weight_decay)
      || !finite(o.rescale))
    return "optimizer hyper-parameters must be finite";
  if ((o.kind == optimizer_kind::adam || o.kind == optimizer_kind::lamb)
      && !(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.epsilon > 0))
    return "adam and lamb need 0 <= beta1, beta2 < 1 and epsilon > 0";
  if ((o.kind == optimizer_kind::lamb || o.kind == optimizer_kind::lars)
      && spec.consistency.model != consistency_spec::bsp)
    return "lamb and lars scale a whole step of the tensor: they need bsp consistency";
  if (!std::isfinite(o.eta) || o.eta < 0)
    return "eta must be finite and >= 0";
  return {};
}

std::string describe_mismatch(const job_spec& ours, const job_spec& theirs) {
  if (ours.num_workers != theirs.num_workers)
    return fmt::format("job '{}' has {} workers, hello says {}", ours.name,
                       ours.num_workers, theirs.num_workers);
  if (ours.chunk_bytes != theirs.chunk_bytes)
    return fmt::format("job '{}' uses {}-byte chunks, hello says {}", ours.name,
                       ours.chunk_bytes, theirs.chunk_bytes);
  auto& a = ours.optimizer;
  auto& b = theirs.optimizer;
  if (a.kind != b.kind || a.learning_rate != b.learning_rate || a.momentum != b.momentum
      || a.beta1 != b.beta1 || a.beta2 != b.beta2 || a.epsilon != b.epsilon
      || a.weight_decay != b.weight_decay || a.rescale != b.rescale || a.eta != b.eta)
    return fmt::format("job '{}' uses optimizer {} (lr {}), hello asks for {} (lr {}) "
                       "or other hyper-parameters",
                       ours.name, to_string(a.kind), a.learning_rate, to_string(b.kind),
                       b.learning_rate);
  if (ours.consistency.model != theirs.consistency.model
      || ours.consistency.staleness != theirs.consistency.staleness)
    return fmt::format("job '{}' runs {}, hello asks for {}", ours.name,
                       to_string(ours.consistency), to_string(theirs.consistency));
  if (ours.compression.kind != theirs.compression.kind
      || ours.compression.ratio != theirs.compression.ratio
      || ours.compression.warmup != theirs.compression.warmup
      || ours.compression.updates != theirs.compression.updates)
    return fmt::format("job '{}' compresses {}{}, hello asks for {}{}", ours.name,
                       to_string(ours.compression),
                       ours.compression.updates ? " with compressed updates" : "",
                       to_string(theirs.compression),
                       theirs.compression.updates ? " with compressed updates" : "");
  if (ours.tensors.size() != theirs.tensors.size())
    return fmt::format("job '{}' has {} tensors, hello declares {}", ours.name,
                       ours.tensors.size(), theirs.tensors.size());
  for (size_t i = 0; i < ours.tensors.size(); ++i) {
    auto& x = ours.tensors[i];
    auto& y = theirs.tensors[i];
    if (x.name != y.name || x.elements != y.elements || x.has_init != y.has_init)
      return fmt::format("tensor #{} is '{}' with {} elements in job '{}', hello "
                         "declares '{}' with {}",
                         i, x.name, x.elements, ours.name, y.name, y.elements);
  }
  return {};
}

std::string validate(const hyper_change& c) {
  struct field {
    const char* name;
    const std::optional<float>& value;
    float below; // exclusive upper bound (0: none)
  };
  const field fields[] = {{"lr", c.learning_rate, 0.0f},
                          {"momentum", c.momentum, 1.0f},
                          {"weight_decay", c.weight_decay, 0.0f},
                          {"beta1", c.beta1, 1.0f},
                          {"beta2", c.beta2, 1.0f}};
  bool any = false;
  for (auto& f : fields) {
    if (!f.value)
      continue;
    any = true;
    float v = *f.value;
    if (!std::isfinite(v) || v < 0.0f)
      return fmt::format("{} must be a finite number >= 0, not {}", f.name, v);
    if (f.below > 0.0f && v >= f.below)
      return fmt::format("{} must be below {}, not {}", f.name, f.below, v);
  }
  if (!any)
    return "no hyper-parameter to change (lr, momentum, weight_decay, beta1, beta2)";
  return {};
}

std::string describe(const hyper_change& c) {
  std::string out;
  auto add = [&](const char* name, const std::optional<float>& v) {
    if (v)
      out += fmt::format("{}={} ", name, *v);
  };
  add("lr", c.learning_rate);
  add("momentum", c.momentum);
  add("weight_decay", c.weight_decay);
  add("beta1", c.beta1);
  add("beta2", c.beta2);
  return out + fmt::format("at clock {}", c.at_clock);
}

optimizer_spec optimizer_at(const job_spec& spec, uint64_t clock) {
  auto out = spec.optimizer;
  std::vector<const hyper_change*> due;
  for (auto& c : spec.schedule)
    if (c.at_clock <= clock)
      due.push_back(&c);
  std::stable_sort(due.begin(), due.end(),
                   [](auto* a, auto* b) { return a->at_clock < b->at_clock; });
  for (auto* c : due) {
    if (c->learning_rate)
      out.learning_rate = *c->learning_rate;
    if (c->momentum)
      out.momentum = *c->momentum;
    if (c->weight_decay)
      out.weight_decay = *c->weight_decay;
    if (c->beta1)
      out.beta1 = *c->beta1;
    if (c->beta2)
      out.beta2 = *c->beta2;
  }
  return out;
}

} // namespace rw
