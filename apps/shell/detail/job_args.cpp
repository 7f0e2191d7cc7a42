#include "apps/shell/detail/job_args.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <lua.hpp>

#include "apps/shell/detail/lua_guard.hpp"
#include "apps/tools/units.hpp"

namespace rw::shell::detail {

namespace {

constexpr const char* job_args_fn = "rw.job_create";
constexpr const char* fields =
  "name, workers, consistency, compression, compress_updates, optimizer, lr, momentum, "
  "beta1, beta2, epsilon, "
  "weight_decay, rescale, eta, chunk_bytes, node, nodes, racks, reduction, worker_racks, "
  "join_timeout_ms, restore, checkpoint_every, checkpoint_dir, replicas, memory, tensors";
constexpr const char* optimizers = "sum, sgd, momentum, nesterov, adam, lamb, lars";

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}", job_args_fn, what));
}

std::string string_field(lua_State* L, const std::string& key, const char* what) {
  if (lua_type(L, -1) != LUA_TSTRING)
    refuse(
      fmt::format("{} must be {} (a string), got {}", key, what, describe_value(L, -1)));
  size_t size = 0;
  const char* data = lua_tolstring(L, -1, &size);
  return {data, size};
}

// A list of strings, such as {"rack-a", "rack-b"}: at least one, none empty.
std::vector<std::string> strings_field(lua_State* L, const std::string& key,
                                       const char* what) {
  if (lua_type(L, -1) != LUA_TTABLE)
    refuse(
      fmt::format("{} must be {} (a list of strings such as {{\"a\", \"b\"}}), got {}",
                  key, what, describe_value(L, -1)));
  std::vector<std::string> out;
  auto n = luaL_len(L, -1);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, i);
    if (lua_type(L, -1) != LUA_TSTRING || lua_rawlen(L, -1) == 0) {
      auto got = describe_value(L, -1);
      lua_pop(L, 1);
      refuse(fmt::format("{}[{}] must be a non-empty string, got {}", key, i, got));
    }
    out.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  if (out.empty())
    refuse(fmt::format("{} must name at least one ({})", key, what));
  return out;
}

float float_field(lua_State* L, const std::string& key) {
  if (lua_type(L, -1) != LUA_TNUMBER)
    refuse(fmt::format("{} must be a number, got {}", key, describe_value(L, -1)));
  return static_cast<float>(lua_tonumber(L, -1));
}

// A Lua integer, or a float with no fractional part, that fits in uint32.
bool whole_u32(lua_State* L, uint32_t& out) {
  if (lua_type(L, -1) != LUA_TNUMBER)
    return false;
  double value = lua_tonumber(L, -1);
  if (lua_isinteger(L, -1))
    value = static_cast<double>(lua_tointeger(L, -1));
  if (!(value >= 0) || value > std::numeric_limits<uint32_t>::max()
      || std::floor(value) != value)
    return false;
  out = static_cast<uint32_t>(value);
  return true;
}

uint32_t chunk_field(lua_State* L) {
  uint32_t bytes = 0;
  if (whole_u32(L, bytes))
    return bytes;
  auto bad = fmt::format("chunk_bytes must be a whole number of bytes or a size such "
                         "as \"32KiB\" or \"1MiB\", got {}",
                         describe_value(L, -1));
  if (lua_type(L, -1) != LUA_TSTRING)
    refuse(bad);
  uint64_t parsed = 0;
  try {
    parsed = tools::parse_bytes(lua_tostring(L, -1));
  } catch (const std::exception&) {
    refuse(bad);
  }
  if (parsed > std::numeric_limits<uint32_t>::max())
    refuse(bad);
  return static_cast<uint32_t>(parsed);
}

// memory = "512MiB" (or a whole number of bytes): at least 1 MiB.
uint64_t memory_field(lua_State* L) {
  auto bad = fmt::format(
    "memory must be a size such as \"512MiB\" or \"2GiB\" (at least "
    "1MiB: the node memory the job may take for parameters and optimizer "
    "state), got {}",
    describe_value(L, -1));
  uint64_t bytes = 0;
  if (lua_type(L, -1) == LUA_TNUMBER) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
      refuse(bad);
    bytes = static_cast<uint64_t>(lua_tointeger(L, -1));
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    try {
      bytes = tools::parse_bytes(lua_tostring(L, -1));
    } catch (const std::exception&) {
      refuse(bad);
    }
  } else {
    refuse(bad);
  }
  if (bytes < (uint64_t{1} << 20) || bytes > (uint64_t{1} << 50))
    refuse(bad);
  return bytes;
}

// tensors = {{"w", 1024}, {name = "b", elements = 16, has_init = true}, ...}: a list, in
// the job's tensor order; each entry {name, elements[, has_init]} by position or by name.
std::vector<tensor_spec> tensors_field(lua_State* L) {
  constexpr const char* form =
    "tensors must be a list such as {{\"w\", 1024}, {name = \"b\", "
    "elements = 16, has_init = true}}";
  if (lua_type(L, -1) != LUA_TTABLE)
    refuse(fmt::format("{}, got {}", form, describe_value(L, -1)));
  std::vector<tensor_spec> out;
  auto n = luaL_len(L, -1);
  lua_pushnil(L);
  int entries = 0;
  while (lua_next(L, -2) != 0) {
    ++entries;
    lua_pop(L, 1);
  }
  if (n == 0 || entries != n)
    refuse(fmt::format("{} (a non-empty list)", form));
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, i);
    if (lua_type(L, -1) != LUA_TTABLE)
      refuse(fmt::format("tensors[{}]: {}, got {}", i, form, describe_value(L, -1)));
    tensor_spec t;
    auto get = [&](int pos, const char* name) {
      lua_getfield(L, -1, name);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_rawgeti(L, -1, pos);
      }
    };
    get(1, "name");
    if (lua_type(L, -1) != LUA_TSTRING)
      refuse(fmt::format("tensors[{}]: the name must be a string, got {}", i,
                         describe_value(L, -1)));
    t.name = lua_tostring(L, -1);
    lua_pop(L, 1);
    get(2, "elements");
    double e = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1.0;
    if (lua_isinteger(L, -1))
      e = static_cast<double>(lua_tointeger(L, -1));
    if (!(e >= 1) || std::floor(e) != e || e > 9.0e15)
      refuse(fmt::format(
        "tensors[{}] ('{}'): elements must be a positive whole number, got {}", i, t.name,
        describe_value(L, -1)));
    t.elements = static_cast<uint64_t>(e);
    lua_pop(L, 1);
    get(3, "has_init");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      refuse(fmt::format("tensors[{}] ('{}'): has_init must be true or false, got {}", i,
                         t.name, describe_value(L, -1)));
    t.has_init = lua_toboolean(L, -1) != 0;
    lua_pop(L, 2); // has_init, the entry
    out.push_back(std::move(t));
  }
  return out;
}

void read_field(lua_State* L, const std::string& key, create_request& req,
                bool& have_name, bool& have_workers) {
  auto& spec = req.spec;
  auto& o = spec.optimizer;
  if (key == "name") {
    spec.name = string_field(L, key, "the job's name");
    have_name = true;
  } else if (key == "workers") {
    if (!whole_u32(L, spec.num_workers))
      refuse(fmt::format("workers must be a whole number (how many workers take part), "
                         "got {}",
                         describe_value(L, -1)));
    have_workers = true;
  } else if (key == "consistency") {
    auto text = string_field(L, key, "\"bsp\", \"ssp:S\" or \"async\"");
    try {
      spec.consistency = parse_consistency(text);
    } catch (const std::invalid_argument& e) {
      refuse(fmt::format("consistency: {}", e.what()));
    }
  } else if (key == "compression") {
    auto text = string_field(
      L, key,
      "\"none\", \"bf16\", \"fp16\", \"topk:RATIO\" or \"topk:RATIO,warmup=STEPS\"");
    auto updates = spec.compression.updates;
    try {
      spec.compression = parse_compression(text);
    } catch (const std::invalid_argument& e) {
      refuse(fmt::format("compression: {}", e.what()));
    }
    spec.compression.updates = updates;
  } else if (key == "compress_updates") {
    if (!lua_isboolean(L, -1))
      refuse(fmt::format("compress_updates must be true or false (results travel back as "
                         "16-bit values too), got {}",
                         describe_value(L, -1)));
    spec.compression.updates = lua_toboolean(L, -1) != 0;
  } else if (key == "optimizer") {
    auto text = string_field(L, key, fmt::format("one of {}", optimizers).c_str());
    auto kind = parse_optimizer_kind(text);
    if (!kind)
      refuse(fmt::format("optimizer must be one of {}, got '{}'", optimizers, text));
    o.kind = *kind;
  } else if (key == "lr") {
    o.learning_rate = float_field(L, key);
  } else if (key == "momentum") {
    o.momentum = float_field(L, key);
  } else if (key == "beta1") {
    o.beta1 = float_field(L, key);
  } else if (key == "beta2") {
    o.beta2 = float_field(L, key);
  } else if (key == "epsilon") {
    o.epsilon = float_field(L, key);
  } else if (key == "weight_decay") {
    o.weight_decay = float_field(L, key);
  } else if (key == "rescale") {
    o.rescale = float_field(L, key);
  } else if (key == "eta") {
    o.eta = float_field(L, key);
  } else if (key == "chunk_bytes") {
    spec.chunk_bytes = chunk_field(L);
  } else if (key == "node") {
    req.placement.node = string_field(L, key, "the name of the node to place the job on");
  } else if (key == "nodes") {
    req.placement.nodes = strings_field(L, key, "the names of the job's nodes");
  } else if (key == "racks") {
    req.placement.racks = strings_field(L, key, "the racks whose nodes hold the job");
  } else if (key == "worker_racks") {
    req.placement.worker_racks = strings_field(
      L, key, "each rank's rack (hierarchical reduction)");
  } else if (key == "join_timeout_ms") {
    if (!whole_u32(L, req.placement.join_timeout_ms)
        || req.placement.join_timeout_ms == 0)
      refuse(
        fmt::format("join_timeout_ms must be a positive whole number of milliseconds "
                    "(how long a hierarchical job placed at join waits for all its "
                    "workers), got {}",
                    describe_value(L, -1)));
  } else if (key == "restore") {
    req.placement.restore = string_field(L, key, "a checkpoint directory to start from");
  } else if (key == "checkpoint_dir") {
    req.placement.checkpoint_dir = string_field(
      L, key, "where periodic checkpoints go (one directory per clock)");
  } else if (key == "checkpoint_every") {
    uint32_t every = 0;
    if (!whole_u32(L, every) || every == 0)
      refuse(
        fmt::format("checkpoint_every must be a positive whole number of clocks, got {}",
                    describe_value(L, -1)));
    req.placement.checkpoint_every = every;
  } else if (key == "replicas") {
    uint32_t n = 0;
    if (!whole_u32(L, n) || n > 1)
      refuse(
        fmt::format("replicas must be 0 or 1 (each chunk also served by the next node "
                    "of the ring, which takes over if its home dies), got {}",
                    describe_value(L, -1)));
    req.placement.replicas = static_cast<int32_t>(n);
  } else if (key == "memory") {
    req.placement.memory = memory_field(L);
  } else if (key == "tensors") {
    spec.tensors = tensors_field(L);
  } else if (key == "reduction") {
    req.placement.reduction = string_field(
      L, key, "how the job reduces across nodes: auto, flat or hierarchical");
  } else {
    refuse(fmt::format("unknown field '{}' (fields: {})", key, fields));
  }
}

} // namespace

create_request read_create_request(lua_State* L, int index) {
  index = lua_absindex(L, index);
  if (lua_type(L, index) != LUA_TTABLE)
    refuse(fmt::format("expects a table such as {{name = \"j\", workers = 4}}, got {}",
                       describe_value(L, index)));
  create_request req;
  bool have_name = false;
  bool have_workers = false;
  lua_pushnil(L);
  while (lua_next(L, index) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      auto key = describe_value(L, -2);
      lua_pop(L, 2);
      refuse(fmt::format("fields are named (name = ..., workers = ...); got a value at "
                         "[{}]",
                         key));
    }
    std::string key = lua_tostring(L, -2);
    try {
      read_field(L, key, req, have_name, have_workers);
    } catch (...) {
      lua_pop(L, 2);
      throw;
    }
    lua_pop(L, 1);
  }
  if (!have_name)
    refuse("name is required (the job's name, a string)");
  if (!have_workers)
    refuse("workers is required (how many workers take part, a whole number)");
  return req;
}

} // namespace rw::shell::detail
