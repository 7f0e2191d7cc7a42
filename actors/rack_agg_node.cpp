#include "actors/rack_agg_node.hpp"

#include <unistd.h>

#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "transports/tcp/endpoint.hpp"

namespace rw::actors {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0)
    return "rack-agg";
  return buf;
}

} // namespace

rack_agg_node::rack_agg_node(caf::actor_system& sys, const runtime::node_config& cfg)
  : sys_(sys) {
  runtime::check_node_config(cfg);
  auto cores = std::max(1u, std::thread::hardware_concurrency());
  auto shard_count = cfg.shards == 0 ? cores : cfg.shards;
  if (shard_count > 4 * cores)
    throw std::runtime_error(fmt::format(
      "--shards {} asks for more than 4 shards per core on a {}-core machine", cfg.shards,
      cores));
  auto name = cfg.name.empty() ? host_name() : cfg.name;

  auto ep = std::make_shared<transports::tcp::endpoint>(
    std::chrono::milliseconds(cfg.io_timeout_ms),
    transports::receive_limits{cfg.max_chunk_bytes, cfg.max_control_bytes});
  address_ = ep->listen(transports::tcp::parse_address(cfg.listen)).to_string();

  for (uint32_t i = 0; i < shard_count; ++i) {
    shard_settings s;
    s.index = i;
    s.step_timeout = std::chrono::milliseconds(cfg.step_timeout_ms);
    shards_.push_back(spawn_chunk_shard(sys, s));
  }
  uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  uint64_t max_job_bytes = cfg.max_job_mib == 0 ? ram / 2 : uint64_t{cfg.max_job_mib} << 20;
  coordinator_settings cs{name, cfg.max_chunk_bytes, cfg.max_workers, max_job_bytes};
  coordinator_ = spawn_rack_coordinator(sys, cs, shards_);
  poller_settings ps{name, cfg.max_control_bytes, defaults::poll_block_ms};
  poller_ = spawn_nic_poller(sys, ps, ep, coordinator_, shards_);
  spdlog::info("node up: name={} role={} endpoint=tcp://{} shards={} cores={} "
               "step_timeout_ms={} io_timeout_ms={} max_chunk_bytes={} max_job_mib={}",
               name, cfg.role, address_, shard_count, cores, cfg.step_timeout_ms,
               cfg.io_timeout_ms, cfg.max_chunk_bytes, max_job_bytes >> 20);
}

rack_agg_node::~rack_agg_node() {
  stop();
}

void rack_agg_node::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  caf::anon_send(poller_, stop_atom::value);
  caf::scoped_actor self{sys_};
  self->wait_for(poller_);
  self->send_exit(coordinator_, caf::exit_reason::user_shutdown);
  for (auto& s : shards_)
    self->send_exit(s, caf::exit_reason::user_shutdown);
  self->wait_for(coordinator_);
  for (auto& s : shards_)
    self->wait_for(s);
}

} // namespace rw::actors
