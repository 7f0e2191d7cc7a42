#include "apps/bench/cluster_job.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/cluster_messages.hpp"
#include "actors/node/control_tls.hpp"
#include "actors/node/idle_policy.hpp"
#include "apps/shell/cluster_client.hpp"
#include "rackweave/errc.hpp"
#include "runtime/credentials.hpp"

namespace rw::bench {

struct cluster_job::impl {
  cluster_job_request req;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<shell::cluster_client> client;
  actors::job_report job;
  std::vector<std::string> connect; // per rank
  std::string token_file;
  std::vector<uint32_t> rank_racks;
};

namespace {

std::string read_secret(const std::string& path) {
  if (path.empty())
    return {};
  auto secret = runtime::read_secret_file(path);
  return secret;
}

// The name of the live node one of whose endpoints is `address` ("" if none is).
std::string node_at(const std::vector<actors::node_info>& nodes,
                    const std::string& address) {
  for (auto& n : nodes)
    for (auto& e : n.endpoints)
      if (e == address)
        return n.name;
  return {};
}

} // namespace

cluster_job::cluster_job(cluster_job_request req) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.req = std::move(req);
  actors::register_cluster_types(d.cfg);
  d.cfg.set("logger.verbosity", caf::atom("quiet"));
  d.cfg.set("scheduler.max-threads", 2);
  rw::actors::configure_idle_policy(d.cfg);
  auto secret = read_secret(d.req.secret_file);
  actors::control_identity control;
  control.cluster_secret = secret; // with a secret, TLS derived from it
  actors::configure_control_tls(d.cfg, control);
  d.sys = std::make_unique<caf::actor_system>(d.cfg);
  try {
    d.client = std::make_unique<shell::cluster_client>(*d.sys, d.req.connect,
                                                       d.req.timeout, secret);
  } catch (const shell::shell_error& e) {
    // Not reached (unavailable, timeout: rw-bench exits 3), or refused (a secret: 1).
    throw rw::error(e.code(), fmt::format("cannot reach the coordinator through {}: {}",
                                          d.req.connect, e.what()));
  }
  try {
    auto live = d.client->nodes();
    actors::job_placement where;
    where.reduction = d.req.reduction;
    where.replicas = d.req.replicas;
    where.checkpoint_every = d.req.checkpoint_every;
    where.checkpoint_dir = d.req.checkpoint_dir;
    auto& named = d.req.worker_racks.empty() ? d.req.rack_options : d.req.worker_racks;
    for (auto& r : named)
      if (std::find(where.racks.begin(), where.racks.end(), r) == where.racks.end())
        where.racks.push_back(r);
    if (where.racks.empty())
      where.node = node_at(live, d.req.connect); // "": the coordinator picks
    else if (d.req.reduction != "flat" && !d.req.worker_racks.empty())
      where.worker_racks = d.req.worker_racks; // each worker at its own rack's agg
    auto created = d.client->job_create(d.req.spec, where);
    d.job = created.job;
    d.token_file = fmt::format("/tmp/rw-bench-{}-{}.token", getpid(), d.job.id);
    auto old = umask(077);
    std::ofstream{d.token_file} << created.token << "\n";
    umask(old);
    chmod(d.token_file.c_str(), 0600);
  } catch (const shell::shell_error& e) {
    // The coordinator refused the job these options ask for (a rack with no node, a
    // spec it cannot serve): a usage error of rw-bench (exit 2).
    throw std::invalid_argument(
      fmt::format("cannot create the job through the coordinator "
                  "found at {}: {}",
                  d.req.connect, e.what()));
  }
  auto& layout = d.job.layout;
  for (uint32_t r = 0; r < d.req.spec.num_workers; ++r) {
    std::string address = d.req.connect;
    if (r < d.req.worker_racks.size())
      for (size_t n = 0; n < layout.racks.size(); ++n)
        if (layout.racks[n] == d.req.worker_racks[r]) {
          address = layout.addresses[n];
          break;
        }
    d.connect.push_back(address);
  }
  d.rank_racks = layout.rank_racks;
  if (d.rank_racks.empty() && layout.reduction == "hierarchical") {
    // Placed at join: each rank's rack option places it (actors/cluster/rack_choice.hpp)
    // where every node of the job shares the workers' host, or none does; a node alone
    // on a worker's host would take the worker, and --verify would say so.
    for (auto& r : d.req.rack_options) {
      auto it = std::find(layout.racks.begin(), layout.racks.end(), r);
      d.rank_racks.push_back(static_cast<uint32_t>(it - layout.racks.begin()));
    }
  }
}

cluster_job::~cluster_job() {
  auto& d = *impl_;
  if (!d.token_file.empty())
    std::remove(d.token_file.c_str());
  if (!d.client)
    return;
  try {
    // With periodic checkpoints, the last ones are whole once the job has ended: its
    // nodes report the end after their checkpoint files (a delete before that drops
    // the entries still on their way, and those checkpoints get no manifest). Bounded:
    // a node that never says so is not waited for long.
    if (d.req.checkpoint_every > 0) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (std::chrono::steady_clock::now() < until) {
        auto state = d.client->job_status(d.job.name).state;
        if (state != "running" && state != "created")
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    d.client->job_delete(d.job.name);
  } catch (const std::exception& e) {
    std::cerr << "rw-bench: could not delete job '" << d.job.name << "': " << e.what()
              << "\n";
  }
  d.client.reset();
  d.sys.reset();
}

const std::string& cluster_job::connect_of(uint32_t rank) const {
  return impl_->connect.at(rank);
}

const std::string& cluster_job::token_file() const {
  return impl_->token_file;
}

const std::vector<std::string>& cluster_job::nodes() const {
  return impl_->job.layout.nodes;
}

const std::string& cluster_job::reduction() const {
  return impl_->job.layout.reduction;
}

const std::vector<uint32_t>& cluster_job::rank_racks() const {
  return impl_->rank_racks;
}

} // namespace rw::bench
