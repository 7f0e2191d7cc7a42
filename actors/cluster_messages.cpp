#include "actors/cluster_messages.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/message.hpp>

namespace rw::actors {

namespace {
const auto error_category = caf::atom("rw");
} // namespace

void merge_lateness(std::vector<rank_lateness>& all, const rank_lateness& one) {
  auto it = std::lower_bound(
    all.begin(), all.end(), one.rank,
    [](const rank_lateness& x, uint32_t rank) { return x.rank < rank; });
  if (it == all.end() || it->rank != one.rank) {
    all.insert(it, one);
    return;
  }
  it->last_us = std::max(it->last_us, one.last_us);
  it->recent_us = std::max(it->recent_us, one.recent_us);
  it->max_us = std::max(it->max_us, one.max_us);
  it->steps = std::max(it->steps, one.steps);
  it->waited_ms = std::max(it->waited_ms, one.waited_ms);
  it->missing_chunks += one.missing_chunks;
}

void register_cluster_types(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<job_spec>("rw::job_spec");
  cfg.add_message_type<hyper_change>("rw::hyper_change");
  cfg.add_message_type<node_info>("rw::node_info");
  cfg.add_message_type<node_admission>("rw::node_admission");
  cfg.add_message_type<std::vector<node_info>>("std::vector<rw::node_info>");
  cfg.add_message_type<job_grant>("rw::job_grant");
  cfg.add_message_type<job_report>("rw::job_report");
  cfg.add_message_type<std::vector<job_report>>("std::vector<rw::job_report>");
  cfg.add_message_type<job_created>("rw::job_created");
  cfg.add_message_type<job_event>("rw::job_event");
  cfg.add_message_type<job_placement>("rw::job_placement");
  cfg.add_message_type<rate_probe_request>("rw::rate_probe_request");
  cfg.add_message_type<rate_probe_result>("rw::rate_probe_result");
  cfg.add_message_type<job_layout>("rw::job_layout");
  cfg.add_message_type<rank_binding>("rw::rank_binding");
  cfg.add_message_type<rank_map>("rw::rank_map");
  cfg.add_message_type<checkpoint_part>("rw::checkpoint_part");
  cfg.add_message_type<chunk_moves>("rw::chunk_moves");
  cfg.add_message_type<checkpoint_info>("rw::checkpoint_info");
  cfg.add_error_category(error_category,
                         [](uint8_t code, caf::atom_value, const caf::message& context) {
                           std::string text = to_string(static_cast<errc>(code));
                           if (context.match_elements<std::string>())
                             text += ": " + context.get_as<std::string>(0);
                           return text;
                         });
}

caf::error cluster_error(errc code, std::string message) {
  return caf::error(static_cast<uint8_t>(code), error_category,
                    caf::make_message(std::move(message)));
}

std::string describe(const caf::actor_system& sys, const caf::error& err) {
  if (err.category() == error_category && err.context().match_elements<std::string>())
    return err.context().get_as<std::string>(0);
  if (err == caf::sec::request_timeout)
    return "no answer in time";
  return sys.render(err);
}

} // namespace rw::actors
