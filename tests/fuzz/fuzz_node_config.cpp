// rw-node's TOML config loader (runtime/node_config.hpp) over any file: it fills the
// config or throws std::runtime_error naming the problem; so does the range check after
// it. Any other exception, crash or sanitizer report is a finding.

#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/node_config.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rw::fuzz::input_file file{data, size};
  const auto& path = file.path;
  // One command line (none given), as rw-node builds it; the config starts afresh.
  static rw::runtime::node_config cfg;
  static std::string config_file;
  static CLI::App* app = [] {
    auto* a = new CLI::App;
    rw::runtime::add_node_options(*a, cfg, config_file);
    a->parse(std::vector<std::string>{});
    return a;
  }();
  cfg = rw::runtime::node_config{};
  try {
    rw::runtime::load_node_config(path, *app, cfg);
    rw::runtime::check_node_config(cfg);
  } catch (const std::runtime_error& e) {
    if (std::string{e.what()}.empty())
      rw::fuzz::fail("a refused config comes without a reason");
  }
  return 0;
}
