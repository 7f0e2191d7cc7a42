#include "runtime/node_config.hpp"

#include <functional>
#include <set>
#include <stdexcept>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <toml++/toml.h>

namespace rw::runtime {

namespace {

struct option_def {
  std::string key;  // "section.name" in the TOML file
  std::string flag; // "--name"
  std::string help;
  std::function<void(CLI::App&)> add;
  std::function<void(const toml::node&)> set; // throws on a wrong type
};

template <class T>
option_def def(std::string key, std::string flag, std::string help, T& field) {
  option_def d;
  d.key = key;
  d.flag = flag;
  d.help = help + "  [config: " + key + "]";
  d.add = [flag, text = d.help, &field](CLI::App& app) {
    app.add_option(flag, field, text)->capture_default_str();
  };
  d.set = [key, &field](const toml::node& n) {
    if constexpr (std::is_same_v<T, std::string>) {
      auto v = n.value<std::string>();
      if (!v)
        throw std::runtime_error(fmt::format("key '{}' must be a string", key));
      field = *v;
    } else {
      auto v = n.value<int64_t>();
      if (!v || *v < 0 || *v > int64_t{UINT32_MAX})
        throw std::runtime_error(
          fmt::format("key '{}' must be a whole number from 0 to {}", key, UINT32_MAX));
      field = static_cast<T>(*v);
    }
  };
  return d;
}

std::vector<option_def> option_table(node_config& c) {
  return {
    def("node.role", "--role", "what this node does: rack-agg", c.role),
    def("node.name", "--name", "node name in logs and replies (default: host name)",
        c.name),
    def("node.listen", "--listen", "HOST:PORT workers connect to (port 0: any free)",
        c.listen),
    def("node.log_level", "--log-level",
        "trace, debug, info, warn, error or off", c.log_level),
    def("shards.count", "--shards", "chunk shards (serving cores); 0 = one per core",
        c.shards),
    def("limits.max_chunk_bytes", "--max-chunk-bytes",
        "largest chunk size a job may ask for", c.max_chunk_bytes),
    def("limits.max_control_bytes", "--max-control-bytes",
        "largest hello/error payload accepted", c.max_control_bytes),
    def("limits.max_workers", "--max-workers", "largest job (workers) accepted",
        c.max_workers),
    def("limits.max_job_mib", "--max-job-mib",
        "node memory (MiB) one job's parameters and optimizer state may take; 0 = half "
        "the machine's RAM",
        c.max_job_mib),
    def("timeouts.step_ms", "--step-timeout-ms",
        "how long a step waits for missing workers before the job fails",
        c.step_timeout_ms),
    def("timeouts.io_ms", "--io-timeout-ms",
        "how long a send may block on a worker that does not read", c.io_timeout_ms),
  };
}

} // namespace

void add_node_options(CLI::App& app, node_config& cfg, std::string& config_file) {
  app.add_option("--config", config_file,
                 "TOML file with any of the keys below (flags given here win)")
    ->check(CLI::ExistingFile);
  for (auto& d : option_table(cfg))
    d.add(app);
}

void load_node_config(const std::string& path, const CLI::App& app, node_config& cfg) {
  toml::table file;
  try {
    file = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                         e.source().begin.column, e.description()));
  }
  auto table = option_table(cfg);
  std::set<std::string> known;
  for (auto& d : table)
    known.insert(d.key);
  // Every key in the file must be one we know.
  for (auto& [section, node] : file) {
    auto* sub = node.as_table();
    if (sub == nullptr)
      throw std::runtime_error(fmt::format("{}: '{}' must be a [section]", path,
                                           std::string(section.str())));
    for (auto& [name, value] : *sub) {
      auto key = fmt::format("{}.{}", section.str(), name.str());
      if (known.count(key) == 0)
        throw std::runtime_error(fmt::format("{}: unknown key '{}'", path, key));
    }
  }
  for (auto& d : table) {
    if (app.count(d.flag) > 0)
      continue; // the command line wins
    auto node = file.at_path(d.key);
    if (!node)
      continue;
    try {
      d.set(*node.node());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
    }
  }
}

void check_node_config(const node_config& cfg) {
  if (cfg.role != "rack-agg")
    throw std::runtime_error(
      fmt::format("unknown role '{}': this build serves --role rack-agg", cfg.role));
  static const std::set<std::string> levels{"trace", "debug", "info", "warn",
                                            "error", "critical", "off"};
  if (levels.count(cfg.log_level) == 0)
    throw std::runtime_error(fmt::format(
      "unknown log level '{}' (trace, debug, info, warn, error, off)", cfg.log_level));
  if (cfg.max_chunk_bytes < 4 || cfg.max_chunk_bytes % 4 != 0
      || cfg.max_chunk_bytes > 256u * 1024 * 1024)
    throw std::runtime_error("--max-chunk-bytes must be a multiple of 4 up to 256 MiB");
  if (cfg.max_control_bytes < 1024)
    throw std::runtime_error("--max-control-bytes must be at least 1024");
  if (cfg.max_workers == 0)
    throw std::runtime_error("--max-workers must be at least 1");
  if (cfg.step_timeout_ms == 0 || cfg.io_timeout_ms == 0)
    throw std::runtime_error("timeouts must be at least 1 ms");
}

} // namespace rw::runtime
