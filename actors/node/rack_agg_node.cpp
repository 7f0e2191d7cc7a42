#include "actors/node/rack_agg_node.hpp"

#include "actors/node/control_tls.hpp"

#include <unistd.h>

#include <map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "runtime/credentials.hpp"
#include "runtime/kernels.hpp"
#include "runtime/nic_speed.hpp"
#include "transports/fabric/core.hpp"
#include "transports/fabric/endpoint.hpp"
#include "transports/fabric/kept_signals.hpp"
#include "transports/shm/endpoint.hpp"
#include "transports/tcp/endpoint.hpp"

namespace rw::actors {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0)
    return "rack-agg";
  return buf;
}

constexpr auto start_timeout = std::chrono::seconds(10);

} // namespace

rack_agg_node::rack_agg_node(caf::actor_system& sys, const runtime::node_config& cfg)
  : sys_(sys) {
  runtime::check_node_config(cfg);
  runtime::select_kernels(cfg.kernels);
  auto name = cfg.name.empty() ? host_name() : cfg.name;
  topo_ = runtime::topology::discover();
  runtime::placement_request req{cfg.shards, cfg.shard_cores, cfg.shard_numa, cfg.listen,
                                 runtime::pollers_per_listen(cfg)};
  plan_ = runtime::plan_placement(*topo_, req);

  // Bind every endpoint before anything runs.
  std::vector<std::shared_ptr<transports::tcp::endpoint>> eps;
  // What every endpoint's strangers may hold at once (their hellos as they arrive).
  auto unjoined = std::make_shared<transports::byte_budget>(uint64_t{cfg.max_unjoined_mib}
                                                            << 20);
  for (auto& e : plan_.endpoints) {
    transports::tcp::accept_policy accepting;
    accepting.send_queue_bytes = uint64_t{cfg.send_queue_mib} << 20;
    accepting.max_per_host = cfg.max_peer_connections;
    accepting.max_strangers_per_host = cfg.max_peer_strangers;
    accepting.stranger_bytes = unjoined;
    auto ep = std::make_shared<transports::tcp::endpoint>(
      std::chrono::milliseconds(cfg.io_timeout_ms),
      transports::receive_limits{cfg.max_chunk_bytes, cfg.max_control_bytes,
                                 cfg.first_frame_ms},
      accepting);
    addresses_.push_back(
      ep->listen(transports::tcp::parse_address(e.listen)).to_string());
    eps.push_back(ep);
  }

  // The fabric provider too: a missing one stops the node before anything runs.
  std::shared_ptr<transports::fabric::domain> dom;
  if (cfg.fabric != "off") {
    auto host = transports::tcp::parse_address(addresses_.front()).host;
    if (host == "0.0.0.0" || host == "::")
      host.clear();
    try {
      dom = transports::fabric::domain::open(cfg.fabric, host);
    } catch (const std::exception& e) {
      if (cfg.fabric != "auto")
        throw std::runtime_error(std::string(e.what()) + " (--fabric " + cfg.fabric
                                 + "; --fabric off runs TCP and shared memory only)");
      spdlog::warn("fabric: --fabric auto found no usable provider: {}; TCP only",
                   e.what());
    }
  }
  // One domain per NIC asked for (--fabric-nics), each with what its endpoint sends
  // from, registered once: the shards pin each job's arena in every one as the job is
  // made.
  std::vector<std::shared_ptr<transports::fabric::domain>> doms;
  if (dom && cfg.fabric_nics.empty()) {
    doms.push_back(dom);
  } else if (dom) {
    std::vector<std::string> nics;
    for (size_t at = 0; at <= cfg.fabric_nics.size();) {
      auto comma = std::min(cfg.fabric_nics.find(',', at), cfg.fabric_nics.size());
      if (comma > at)
        nics.push_back(cfg.fabric_nics.substr(at, comma - at));
      at = comma + 1;
    }
    try {
      doms = transports::fabric::domain::open_nics(dom->provider(), nics);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (--fabric-nics "
                               + cfg.fabric_nics + ")");
    }
  }
  // Each NIC as --fabric-endpoints endpoints (an endpoint's transmit progress runs one
  // thread at a time), each on a domain of its own, with its own pool and poller.
  runtime::fabric_choice fabric_count;
  std::vector<uint32_t> dom_nic; // doms[i] is endpoint dom_index[i] of NIC dom_nic[i]
  std::vector<uint32_t> dom_index;
  if (!doms.empty()) {
    fabric_count = runtime::choose_fabric_endpoints(
      doms.front()->provider(), static_cast<uint32_t>(topo_->cores().size()),
      static_cast<uint32_t>(doms.size()), runtime::fabric_endpoints_per_nic(cfg));
    std::vector<std::shared_ptr<transports::fabric::domain>> all;
    for (uint32_t n = 0; n < doms.size(); ++n)
      for (uint32_t k = 0; k < fabric_count.per_nic; ++k) {
        all.push_back(k == 0 ? doms[n] : doms[n]->again());
        dom_nic.push_back(n);
        dom_index.push_back(k);
      }
    doms = std::move(all);
  }
  std::vector<std::shared_ptr<transports::fabric::registration_cache>> send_caches;
  for (auto& d : doms)
    send_caches.push_back(transports::fabric::core::make_send_cache(d));

  // One supervisor per NUMA domain that has shards or endpoints.
  auto pinned = cfg.pin ? topo_ : nullptr;
  std::map<uint32_t, supervisor_settings> domains;
  std::vector<std::shared_ptr<const runtime::thread_cpu_slot>> shard_cpu;
  auto test_delays = runtime::test_answer_delays(cfg);
  if (!test_delays.empty()) {
    std::string said;
    for (const auto& [tensor, ms] : test_delays)
      said += fmt::format("{}tensor {} by {} ms", said.empty() ? "" : ", ", tensor,
                          ms.count());
    spdlog::warn("--test-delay-answers (a test hook, never for production): every job's "
                 "updates of {} are held back before they are sent",
                 said);
  }
  for (uint32_t i = 0; i < plan_.shards.size(); ++i) {
    auto& p = plan_.shards[i];
    shard_settings s;
    s.index = i;
    s.cpu_clock = std::make_shared<runtime::thread_cpu_slot>();
    shard_cpu.push_back(s.cpu_clock);
    s.topo = pinned;
    s.core = p.core;
    s.numa = p.numa;
    s.step_timeout = std::chrono::milliseconds(cfg.step_timeout_ms);
    s.slow_step = std::chrono::milliseconds(cfg.slow_step_ms);
    s.keep_finished = std::chrono::milliseconds(cfg.keep_finished_ms);
    s.priority = cfg.priority;
    s.test_answer_delays = test_delays;
    if (!send_caches.empty()) // each job's arena registered with the NICs as it is made
      s.register_memory = [send_caches](const void* data, size_t bytes) {
        auto pins = std::make_shared<std::vector<std::shared_ptr<void>>>();
        for (auto& c : send_caches)
          pins->push_back(c->pin(data, bytes));
        return std::shared_ptr<void>(std::move(pins));
      };
    domains[p.numa].numa = p.numa;
    domains[p.numa].shards.push_back(s);
  }
  for (uint32_t i = 0; i < plan_.endpoints.size(); ++i) {
    auto& p = plan_.endpoints[i];
    poller_settings s;
    s.node_name = name;
    s.endpoint_index = i;
    s.endpoints = addresses_;
    s.max_control_bytes = cfg.max_control_bytes;
    s.topo = pinned;
    s.core = p.poller.core;
    s.numa = p.poller.numa;
    s.prealloc_buffers = cfg.prealloc_buffers;
    s.priority = cfg.priority;
    domains[p.poller.numa].numa = p.poller.numa;
    domains[p.poller.numa].endpoints.push_back({s, eps[i]});
  }
  caf::scoped_actor self{sys};
  std::string
    failure; // set by a failed start-up request; thrown once the request is done
  auto fail_with = [&](std::string what) {
    return [&failure, &sys, what](caf::error& err) {
      failure = what + ": " + sys.render(err);
    };
  };
  auto check = [&] {
    if (failure.empty())
      return;
    stop();
    throw std::runtime_error(failure);
  };
  shards_.resize(plan_.shards.size());
  for (auto& [numa, settings] : domains) {
    auto indexes = settings.shards;
    auto sup = spawn_numa_supervisor(sys, settings);
    supervisors_.push_back(sup);
    self->request(sup, start_timeout, get_atom::value)
      .receive(
        [&](std::vector<chunk_shard_actor>& got) {
          for (size_t k = 0; k < got.size(); ++k)
            shards_[indexes[k].index] = got[k];
        },
        fail_with(fmt::format("the supervisor of NUMA domain {} failed to start", numa)));
    check();
  }
  // Every shard must be up (and pinned, if asked) before workers can come.
  for (uint32_t i = 0; i < shards_.size(); ++i) {
    self->request(shards_[i], start_timeout, stats_atom::value)
      .receive([](shard_stats&) {},
               fail_with(fmt::format("shard {} failed to start", i)));
    check();
  }

  uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  uint64_t max_job_bytes = cfg.max_job_mib == 0 ? ram / 2
                                                : uint64_t{cfg.max_job_mib} << 20;
  coordinator_settings cs{name,          cfg.max_chunk_bytes,   cfg.max_workers,
                          max_job_bytes, plan_.shard_endpoints, cfg.shm,
                          cfg.open_jobs};
  cs.rejoin_timeout = std::chrono::milliseconds(cfg.rejoin_timeout_ms);
  cs.max_open_jobs_per_peer = cfg.max_open_jobs_per_peer;
  cs.max_open_jobs_bytes = cfg.max_open_jobs_mib == 0
                             ? max_job_bytes
                             : uint64_t{cfg.max_open_jobs_mib} << 20;
  cs.balance_interval = std::chrono::milliseconds(cfg.balance ? cfg.balance_ms : 0);
  cs.balance_ratio = cfg.balance_ratio;
  auto kib = runtime::job_kib_per_shard(cfg);
  job_shares_ = detail::choose_bytes_per_shard(!kib, kib.value_or(0),
                                               static_cast<uint32_t>(shards_.size()));
  cs.job_bytes_per_shard = job_shares_.bytes_per_shard;
  cs.shard_cpu = std::move(shard_cpu);
  try {
    cs.checkpoint_root = runtime::checkpoint::checkpoint_root{cfg.checkpoint_root};
  } catch (const std::exception& e) {
    failure = e.what();
    check();
  }
  coordinator_ = spawn_rack_coordinator(sys, cs, shards_);
  link_settings ls;
  ls.node.name = name;
  ls.node.role = "rack-agg";
  ls.node.rack = cfg.rack.empty() ? host_name() : cfg.rack;
  ls.node.endpoints = addresses_;
  ls.node.shards = uint32_t(shards_.size());
  ls.node.uplink_gbps = cfg.uplink_gbps;
  ls.node.core_gbps = cfg.core_gbps;
  if (cfg.uplink_gbps <= 0) { // auto's plan takes the NIC's speed for the agg links
    auto nic = runtime::nic_speed_for(
      transports::tcp::parse_address(addresses_.front()).host);
    ls.node.nic_gbps = nic.gbps;
    ls.node.nic = nic.device;
    if (nic.gbps > 0)
      spdlog::info(
        "node: no --uplink-gbps; {} reports {} Gbit/s, taken for the rack's links",
        nic.device, nic.gbps);
    else
      spdlog::info(
        "node: no --uplink-gbps and no NIC speed ({}): the rack's links count as "
        "fast as the probed core link",
        nic.why);
  }
  ls.heartbeat = std::chrono::milliseconds(cfg.heartbeat_ms);
  if (cfg.coordinator.empty()) {
    try {
      cluster_ = std::make_unique<coordinator_node>(sys, cfg, addresses_.front(), false);
    } catch (const std::exception& e) {
      failure = e.what();
      check();
    }
    ls.embedded = cluster_->actor();
    ls.embedded_address = cluster_->control_address();
  } else {
    ls.via = cfg.coordinator;
    if (!cfg.cluster_secret_file.empty()) {
      try {
        ls.secret = runtime::read_secret_file(cfg.cluster_secret_file);
      } catch (const std::exception& e) {
        failure = e.what();
        check();
      }
    }
  }
  link_ = spawn_cluster_link(sys, ls, coordinator_);
  pollers_.resize(plan_.endpoints.size());
  size_t d = 0;
  for (auto& [numa, settings] : domains) {
    auto& sup = supervisors_[d++];
    auto eps = settings.endpoints;
    self->request(sup, start_timeout, start_atom::value, coordinator_, shards_)
      .receive(
        [&](std::vector<nic_poller_actor>& got) {
          for (size_t k = 0; k < got.size(); ++k)
            pollers_[eps[k].settings.endpoint_index] = got[k];
        },
        fail_with("the NIC pollers failed to start"));
    check();
  }
  // The shared-memory and fabric pollers: on the first endpoint's poller core unless
  // said otherwise.
  auto side_poller = [&] {
    poller_settings s;
    s.node_name = name;
    s.endpoints = addresses_;
    s.max_control_bytes = cfg.max_control_bytes;
    s.topo = pinned;
    s.core = plan_.endpoints.front().poller.core;
    s.numa = plan_.endpoints.front().poller.numa;
    s.priority = cfg.priority;
    return s;
  };
  std::string shm_where = "off";
  if (cfg.shm) {
    auto shm_ep = std::make_shared<transports::shm::endpoint>(
      std::chrono::milliseconds(cfg.io_timeout_ms),
      uint64_t{cfg.send_queue_mib > 0 ? cfg.send_queue_mib : defaults::send_queue_mib}
        << 20);
    auto s = side_poller();
    s.thread_name = "rw-poll-shm";
    shm_poller_ = spawn_nic_poller(sys, s, shm_ep, coordinator_, shards_);
    // Workers collect the doorbell (and their job's parameters) as descriptors from
    // this socket, with the ticket their welcome carries: no name to open.
    auto handover = std::make_shared<transports::shm::handover>();
    for (auto& p : pollers_)
      self->send(p, shm_atom::value, caf::actor_cast<caf::actor>(shm_poller_),
                 shm_ep->bell_name(), handover);
    shm_where = fmt::format("{} (cpu {}, handover {})", shm_ep->describe(), s.core.os_cpu,
                            handover->address());
  }
  std::vector<std::string> fabric_where;
  for (size_t n = 0; n < doms.size(); ++n) {
    auto& d = doms[n];
    auto s = side_poller();
    s.thread_name = fabric_count.per_nic > 1
                      ? fmt::format("rw-poll-fab-{}-{}", dom_nic[n], dom_index[n])
                      : fmt::format("rw-poll-fab-{}", dom_nic[n]);
    // A core of the NIC's domain: the TCP pollers' in turn (a fabric worker's TCP
    // connection carries little).
    auto place = runtime::fabric_poller_place(*topo_, plan_, d->numa(), dom_index[n]);
    s.core = place.core;
    s.numa = place.numa;
    transports::fabric::endpoint_settings es;
    es.slots = cfg.fabric_slots;
    // The NIC's pool shared out among its endpoints: resident memory (the pool is
    // touched where it is allocated) stays what --fabric-pool says, however many.
    es.pool_bytes = (uint64_t{cfg.fabric_pool_mib} << 20) / fabric_count.per_nic;
    es.send_memory = send_caches[n];
    es.numa = s.numa;
    es.io_timeout_ms = static_cast<int>(cfg.io_timeout_ms);
    es.send_queue_bytes = uint64_t{cfg.send_queue_mib} << 20; // 0: sends wait for credit
    es.index = dom_index[n];
    es.per_nic = fabric_count.per_nic;
    auto fab_ep = std::make_shared<transports::fabric::endpoint>(d, es);
    auto poller = spawn_nic_poller(sys, s, fab_ep, coordinator_, shards_);
    fabric_pollers_.push_back(poller);
    for (auto& p : pollers_)
      self->send(p, fabric_atom::value, caf::actor_cast<caf::actor>(poller),
                 std::shared_ptr<transports::endpoint>{fab_ep});
    fabric_where.push_back(fmt::format(
      "{} ({}; poller cpu {}, up to {} slots per worker from a {:g} MiB "
      "receive pool, results placed: {})",
      fab_ep->describe(), d->describe(), s.core.os_cpu, es.slots,
      double(es.pool_bytes) / (1 << 20), to_string(fab_ep->result_placement())));
  }
  if (fabric_where.empty())
    fabric_where.push_back("off");
  // Every poller, the shared-memory and fabric ones included, hears of a restarted
  // shard: one left out would keep routing its workers' chunks to the dead shard.
  auto every_poller = pollers_;
  if (shm_poller_)
    every_poller.push_back(shm_poller_);
  every_poller.insert(every_poller.end(), fabric_pollers_.begin(), fabric_pollers_.end());
  for (auto& sup : supervisors_)
    self->send(sup, peers_atom::value, coordinator_, every_poller);
  std::vector<caf::actor> poller_handles;
  for (auto& p : every_poller)
    poller_handles.push_back(caf::actor_cast<caf::actor>(p));
  self->send(coordinator_, pollers_atom::value, std::move(poller_handles));

  spdlog::info("node up: name={} role={} rack={} shards={} endpoints=[{}] kernels={} "
               "pinned={} priority={} balance={} step_timeout_ms={} slow_step_ms={} "
               "rejoin_timeout_ms={} io_timeout_ms={} max_chunk_bytes={} max_job_mib={}",
               name, cfg.role, ls.node.rack, shards_.size(), fmt::join(addresses_, ", "),
               runtime::kernels().isa, cfg.pin, cfg.priority,
               cfg.balance
                 ? fmt::format("every {} ms, ratio {}", cfg.balance_ms, cfg.balance_ratio)
                 : std::string{"off"},
               cfg.step_timeout_ms, cfg.slow_step_ms, cfg.rejoin_timeout_ms,
               cfg.io_timeout_ms, cfg.max_chunk_bytes, max_job_bytes >> 20);
  spdlog::info("cluster: {} open_jobs={}",
               cluster_ ? "this node embeds the coordinator, control "
                            + cluster_->control_address()
                        : "joining the coordinator found through " + cfg.coordinator,
               cfg.open_jobs);
  spdlog::info("topology: {}", topo_->describe());
  spdlog::info("shared memory for colocated workers: {}", shm_where);
  if (!fabric_count.why.empty())
    spdlog::info("fabric endpoints: {}", fabric_count.why);
  for (auto& f : fabric_where)
    spdlog::info("fabric: {}", f);
  if (auto n = transports::fabric::kept_signals::restored())
    spdlog::info("fabric: put back {} signal handler(s) that libfabric's providers had "
                 "installed (libpsm2 takes the faults, SIGINT and SIGTERM): the node's "
                 "own handling stays",
                 n);
  for (uint32_t i = 0; i < plan_.shards.size(); ++i)
    spdlog::info("shard {}: cpu {} numa {}", i, plan_.shards[i].core.os_cpu,
                 plan_.shards[i].numa);
  for (uint32_t i = 0; i < plan_.endpoints.size(); ++i) {
    auto& e = plan_.endpoints[i];
    std::vector<uint32_t> served;
    for (uint32_t s = 0; s < plan_.shard_endpoints.size(); ++s)
      for (auto x : plan_.shard_endpoints[s])
        if (x == i)
          served.push_back(s);
    spdlog::info("endpoint {}: tcp://{} nic={} poller cpu {} numa {} serves shards [{}]",
                 i, addresses_[i], e.nic.empty() ? "(any)" : e.nic, e.poller.core.os_cpu,
                 e.poller.numa, fmt::join(served, ","));
  }
  spdlog::info("pollers: {}", plan_.pollers_why);
  spdlog::info("job shards: {}", job_shares_.why);
  for (auto& note : plan_.notes)
    spdlog::warn("placement: {}", note);
}

rack_agg_node::~rack_agg_node() {
  stop();
}

std::string rack_agg_node::drain() {
  if (!link_)
    return "not in a cluster: nothing to drain";
  caf::scoped_actor self{sys_};
  std::string out;
  self
    ->request(link_,
              std::chrono::milliseconds(defaults::drain_timeout_ms)
                + std::chrono::seconds(5),
              drain_atom::value)
    .receive([&](std::string& done) { out = std::move(done); },
             [&](caf::error& err) { out = "the drain failed: " + describe(sys_, err); });
  return out;
}

void rack_agg_node::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  caf::scoped_actor self{sys_};
  if (link_) {
    self->request(link_, std::chrono::seconds(5), leave_atom::value)
      .receive([](ok_atom) {}, [](caf::error&) {});
    self->wait_for(link_);
  }
  if (shm_poller_) {
    self->send(shm_poller_, stop_atom::value);
    self->wait_for(shm_poller_);
  }
  for (auto& p : fabric_pollers_) {
    self->send(p, stop_atom::value);
    self->wait_for(p);
  }
  for (auto& sup : supervisors_)
    self->request(sup, std::chrono::seconds(30), stop_atom::value)
      .receive([](ok_atom) {},
               [](caf::error& err) {
                 spdlog::error("a supervisor did not stop cleanly: {}", to_string(err));
               });
  if (coordinator_) {
    self->send_exit(coordinator_, caf::exit_reason::user_shutdown);
    self->wait_for(coordinator_);
  }
  for (auto& sup : supervisors_)
    self->wait_for(sup);
  if (cluster_)
    cluster_->stop();
}

} // namespace rw::actors
