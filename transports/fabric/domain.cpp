#include "transports/fabric/domain.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include <fmt/format.h>

#include "rackweave/errc.hpp"
#include "runtime/credentials.hpp"
#include "transports/fabric/kept_signals.hpp"
#include "transports/fabric/libfabric.hpp"

namespace rw::transports::fabric {

namespace {

// FI_SOURCE: every received completion names its sender, so that a write or credit is
// checked against the connection it names (endpoint.hpp).
constexpr uint64_t needed_caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND
                                 | FI_RECV | FI_SOURCE;
// Every registration rule RackWeave can follow; the provider grants a subset.
constexpr uint64_t mr_modes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED
                              | FI_MR_PROV_KEY;
// The order `auto` prefers: real RDMA first.
const char* const preference[] = {"verbs", "efa", "tcp"};

std::string short_name(const std::string& full) {
  return full.substr(0, full.find(';'));
}

struct info_deleter {
  void operator()(fi_info* p) const noexcept {
    if (p)
      lib::freeinfo(p);
  }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

info_ptr hints_for(const std::string& provider) {
  info_ptr h{lib::dupinfo(nullptr)};
  if (!h)
    throw rw::error(errc::internal, "fabric: fi_dupinfo(NULL) failed");
  h->caps = needed_caps;
  h->ep_attr->type = FI_EP_RDM;
  h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  h->domain_attr->mr_mode = static_cast<int>(mr_modes);
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->domain_attr->cq_data_size = 4;
  // A frame notice is delivered after the write it follows (core.hpp).
  h->tx_attr->msg_order = FI_ORDER_SAW;
  h->rx_attr->msg_order = FI_ORDER_SAW;
  if (provider != "auto")
    h->fabric_attr->prov_name = strdup(provider.c_str());
  return h;
}

// Every provider fi_getinfo lists with no requirement at all, for error messages.
std::vector<std::string> providers_here() {
  fi_info* all = nullptr;
  std::vector<std::string> out;
  if (lib::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, nullptr, &all) == 0) {
    for (auto* i = all; i != nullptr; i = i->next) {
      auto name = short_name(i->fabric_attr->prov_name);
      if (std::find(out.begin(), out.end(), name) == out.end())
        out.push_back(name);
    }
    lib::freeinfo(all);
  }
  return out;
}

// What `provider` lacks, said from what it offers without our requirements.
std::string lack(const std::string& provider) {
  info_ptr h{lib::dupinfo(nullptr)};
  h->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* got = nullptr;
  if (lib::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, h.get(), &got) != 0 || !got)
    return {};
  std::string out;
  bool rdm = false, rma = false, source = false, saw = false;
  size_t cq_data = 0;
  for (auto* i = got; i != nullptr; i = i->next) {
    rdm |= i->ep_attr->type == FI_EP_RDM;
    rma |= (i->caps & FI_RMA) != 0;
    source |= (i->caps & FI_SOURCE) != 0;
    saw |= i->tx_attr && i->rx_attr && (i->tx_attr->msg_order & FI_ORDER_SAW)
           && (i->rx_attr->msg_order & FI_ORDER_SAW);
    cq_data = std::max(cq_data, i->domain_attr->cq_data_size);
  }
  lib::freeinfo(got);
  std::vector<std::string> missing;
  if (!rdm)
    missing.push_back("reliable datagram endpoints (FI_EP_RDM)");
  if (!rma)
    missing.push_back("RMA writes (FI_RMA)");
  if (!source)
    missing.push_back("the sender's address in each completion (FI_SOURCE)");
  if (!saw)
    missing.push_back("sends delivered after earlier writes (FI_ORDER_SAW)");
  if (cq_data < 4)
    missing.push_back(fmt::format("4 bytes of immediate data (it carries {})", cq_data));
  if (missing.empty())
    missing.push_back("thread-safe domains or the memory registration modes RackWeave "
                      "follows (FI_MR_LOCAL, VIRT_ADDR, ALLOCATED, PROV_KEY)");
  return fmt::format("{}", fmt::join(missing, ", "));
}

int read_int(const std::string& path) {
  int n = -1;
  if (auto* f = fopen(path.c_str(), "r")) {
    if (fscanf(f, "%d", &n) != 1)
      n = -1;
    fclose(f);
  }
  return n;
}

// The NIC and its NUMA domain: from the provider's NIC attributes (PCI address) where it
// gives them, else from the domain's name (an RDMA device, or a network interface for
// the tcp provider) as sysfs lists it.
int nic_numa(const fi_info* info, std::string& nic) {
  if (info->nic == nullptr || info->nic->device_attr == nullptr) {
    if (info->domain_attr->name == nullptr)
      return -1;
    nic = info->domain_attr->name;
    auto n = read_int("/sys/class/infiniband/" + nic + "/device/numa_node");
    return n >= 0 ? n : read_int("/sys/class/net/" + nic + "/device/numa_node");
  }
  if (info->nic->device_attr->name)
    nic = info->nic->device_attr->name;
  auto* bus = info->nic->bus_attr;
  std::string path;
  if (bus != nullptr && bus->bus_type == FI_BUS_PCI) {
    auto& p = bus->attr.pci;
    path = fmt::format("/sys/bus/pci/devices/{:04x}:{:02x}:{:02x}.{:x}/numa_node",
                       p.domain_id, p.bus_id, p.device_id, p.function_id);
  } else if (!nic.empty()) {
    path = "/sys/class/net/" + nic + "/device/numa_node";
  }
  return path.empty() ? -1 : read_int(path);
}

} // namespace

bool known_provider(const std::string& name) {
  return name == "auto" || name == "verbs" || name == "efa" || name == "tcp";
}

std::string fi_error_text(long rc) {
  return fmt::format("{} ({})", lib::strerror(static_cast<int>(rc < 0 ? -rc : rc)), rc);
}

std::shared_ptr<domain> domain::open(const std::string& provider,
                                     const std::string& source_host) {
  if (!known_provider(provider))
    throw rw::error(
      errc::invalid_spec,
      fmt::format("fabric provider '{}' is not one of auto, verbs, efa, tcp", provider));
  std::vector<std::string> tries;
  if (provider == "auto")
    tries.assign(std::begin(preference), std::end(preference));
  else
    tries.push_back(provider);
  std::vector<std::string> why;
  for (auto& name : tries) {
    auto hints = hints_for(name);
    fi_info* got = nullptr;
    auto flags = source_host.empty() ? 0 : FI_SOURCE;
    auto rc = lib::getinfo(FI_VERSION(1, 9),
                           source_host.empty() ? nullptr : source_host.c_str(), nullptr,
                           flags, hints.get(), &got);
    if (rc != 0 && !source_host.empty()) // the provider may not bind by address
      rc = lib::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints.get(), &got);
    if (rc != 0 || got == nullptr) {
      auto here = providers_here();
      if (std::find(here.begin(), here.end(), name) == here.end())
        why.push_back(
          fmt::format("no libfabric provider '{}' on this machine (it has: {})", name,
                      fmt::join(here, ", ")));
      else
        why.push_back(fmt::format("provider '{}' lacks {}", name, lack(name)));
      continue;
    }
    info_ptr list{got};
    // With `auto`, tcp's offers are ofi_rxm over tcp; skip providers layered on others
    // than the one asked for (a "udp;ofi_rxd" for "tcp").
    fi_info* pick = nullptr;
    for (auto* i = got; i != nullptr && pick == nullptr; i = i->next)
      if (short_name(i->fabric_attr->prov_name) == name)
        pick = i;
    if (pick == nullptr) {
      why.push_back(fmt::format("provider '{}' offered only layered providers", name));
      continue;
    }
    return make(pick, name);
  }
  throw rw::error(errc::unavailable, fmt::format("fabric: {}", fmt::join(why, "; ")));
}

std::shared_ptr<domain> domain::make(const fi_info* pick, const std::string& short_name) {
  std::shared_ptr<domain> d{new domain};
  d->info_ = lib::dupinfo(pick);
  d->provider_name_ = pick->fabric_attr->prov_name;
  d->short_name_ = short_name;
  d->numa_ = nic_numa(pick, d->nic_);
  if (auto rc = lib::open_fabric(d->info_->fabric_attr, &d->fabric_, nullptr); rc != 0)
    throw rw::error(errc::unavailable, fmt::format("fabric: opening provider {}: {}",
                                                   d->provider_name_, fi_error_text(rc)));
  kept_signals keep; // a provider may load more of its libraries here
  if (auto rc = fi_domain(d->fabric_, d->info_, &d->domain_, nullptr); rc != 0)
    throw rw::error(errc::unavailable,
                    fmt::format("fabric: opening domain {} of provider {}: {}",
                                d->info_->domain_attr->name, d->provider_name_,
                                fi_error_text(rc)));
  return d;
}

std::shared_ptr<domain> domain::again() const {
  return make(info_, short_name_);
}

std::vector<std::shared_ptr<domain>> domain::open_nics(
  const std::string& provider, const std::vector<std::string>& nics) {
  auto hints = hints_for(provider);
  fi_info* got = nullptr;
  if (lib::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints.get(), &got) != 0 || !got)
    throw rw::error(errc::unavailable,
                    fmt::format("fabric: provider '{}' offers no domain here", provider));
  info_ptr list{got};
  // One per domain (a NIC; the tcp provider's are network interfaces), the first
  // offer of each (several address families may share one).
  std::vector<std::pair<std::string, const fi_info*>> here;
  for (auto* i = got; i != nullptr; i = i->next) {
    if (short_name(i->fabric_attr->prov_name) != provider || !i->domain_attr->name)
      continue;
    std::string name = i->domain_attr->name;
    if (std::none_of(here.begin(), here.end(), [&](auto& h) { return h.first == name; }))
      here.emplace_back(name, i);
  }
  std::vector<std::string> names;
  for (auto& h : here)
    names.push_back(h.first);
  bool all = nics.size() == 1 && nics[0] == "all";
  std::vector<std::shared_ptr<domain>> out;
  for (auto& h : here)
    if (all || std::find(nics.begin(), nics.end(), h.first) != nics.end())
      out.push_back(make(h.second, provider));
  if (!all)
    for (auto& want : nics)
      if (std::find(names.begin(), names.end(), want) == names.end())
        throw rw::error(
          errc::invalid_spec,
          fmt::format("fabric: provider '{}' has no NIC '{}' here (it has: {})", provider,
                      want, fmt::join(names, ", ")));
  if (out.empty())
    throw rw::error(errc::unavailable,
                    fmt::format("fabric: provider '{}' offers no NIC here", provider));
  return out;
}

domain::~domain() {
  if (domain_)
    fi_close(&domain_->fid);
  if (fabric_)
    fi_close(&fabric_->fid);
  if (info_)
    lib::freeinfo(info_);
}

bool domain::mr_virt_addr() const noexcept {
  return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
}
bool domain::mr_prov_key() const noexcept {
  return (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0;
}
size_t domain::iov_limit() const noexcept {
  return std::max<size_t>(1, info_->tx_attr->iov_limit);
}
size_t domain::inject_size() const noexcept {
  return info_->tx_attr->inject_size;
}
fabric::placement domain::placement() const noexcept {
  if (info_->tx_attr->rma_iov_limit >= 2)
    return placement::scatter;
  // Ordered placement of the header's 64 bytes before the payload's write.
  if ((info_->tx_attr->msg_order & (FI_ORDER_WAW | FI_ORDER_RMA_WAW)) != 0
      && info_->ep_attr->max_order_waw_size >= 64)
    return placement::ordered;
  return placement::off;
}

const char* to_string(placement p) noexcept {
  switch (p) {
    case placement::scatter: return "scatter";
    case placement::ordered: return "ordered";
    default: return "off";
  }
}
uint64_t domain::next_key() noexcept {
  auto bytes = std::min<size_t>(info_->domain_attr->mr_key_size, sizeof(uint64_t));
  uint64_t mask = bytes >= sizeof(uint64_t) ? ~uint64_t{0}
                                            : (uint64_t{1} << (8 * bytes)) - 1;
  uint64_t key = 0;
  while (key == 0)
    key = runtime::random_u64() & mask;
  return key;
}

std::string domain::describe() const {
  return fmt::format("provider={} fabric={} domain={} nic={} numa={}", provider_name_,
                     info_->fabric_attr->name ? info_->fabric_attr->name : "?",
                     info_->domain_attr->name ? info_->domain_attr->name : "?",
                     nic_.empty() ? "(unknown)" : nic_,
                     numa_ < 0 ? std::string{"(unknown)"} : std::to_string(numa_));
}

} // namespace rw::transports::fabric
