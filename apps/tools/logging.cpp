#include "apps/tools/logging.hpp"

#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace rw::tools {

namespace {

// %* in a pattern: the message, escaped for a JSON string.
class json_message final : public spdlog::custom_flag_formatter {
public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    auto text = json_escape(std::string(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override {
    return std::make_unique<json_message>();
  }
};

std::unique_ptr<spdlog::formatter> make_formatter(const std::string& format,
                                                  const std::string& node) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  if (format == "json") {
    // The node's name goes into the pattern: escaped for JSON, then % doubled for spdlog.
    std::string name;
    for (char c : json_escape(node))
      name += c == '%' ? std::string("%%") : std::string(1, c);
    f->add_flag<json_message>('*').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","node":")" + name
      + R"(","msg":"%*"})");
  } else {
    f->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  }
  return f;
}

} // namespace

std::string json_escape(const std::string& s) {
  // nlohmann's serializer: quotes, backslashes and control characters escaped, and bytes
  // that are not UTF-8 (a stranger's job name, say) replaced by U+FFFD, so every line
  // stays JSON a log shipper can parse.
  auto quoted = nlohmann::json(s).dump(-1, ' ', false,
                                       nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

void setup_node_logging(const log_options& cfg, const std::string& node) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!cfg.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
        cfg.file, static_cast<size_t>(cfg.max_mib) * 1024 * 1024, cfg.files));
    } catch (const spdlog::spdlog_ex& e) {
      throw std::runtime_error(
        fmt::format("cannot write the log file --log-file {}: {}", cfg.file, e.what()));
    }
  }
  for (auto& s : sinks)
    s->set_formatter(make_formatter(cfg.format, node));
  auto logger = std::make_shared<spdlog::logger>("rw-node", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::from_str(cfg.level));
  // Warnings and errors reach the file at once; info lines within a second.
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::flush_every(std::chrono::seconds(1));
}

} // namespace rw::tools
