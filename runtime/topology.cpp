#include "runtime/topology.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>

#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <sys/mman.h>

#include <fmt/format.h>

namespace rw::runtime {

struct topology::hw {
  hwloc_topology_t topo = nullptr;
  ~hw() {
    if (topo != nullptr)
      hwloc_topology_destroy(topo);
  }
};

namespace {

// The NUMA domain whose cpuset contains `set`'s first CPU (0 if none does).
uint32_t numa_of_cpuset(hwloc_topology_t topo, hwloc_const_cpuset_t set, bool& known) {
  known = false;
  if (set == nullptr || hwloc_bitmap_iszero(set))
    return 0;
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
    if (hwloc_bitmap_intersects(node->cpuset, set)) {
      known = true;
      return node->os_index;
    }
  }
  return 0;
}

void add_addresses(std::vector<nic_info>& nics) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    return;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET)
      continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
              sizeof(buf));
    nic_info* nic = nullptr;
    for (auto& n : nics)
      if (n.name == a->ifa_name)
        nic = &n;
    if (nic == nullptr) { // loopback, veth, bridges: no hwloc object, no locality
      nics.push_back({a->ifa_name, "network", 0, false, {}});
      nic = &nics.back();
    }
    nic->ipv4.emplace_back(buf);
  }
  freeifaddrs(list);
}

} // namespace

topology::~topology() = default;

std::shared_ptr<const topology> topology::discover() {
  std::shared_ptr<topology> t{new topology()};
  t->hw_ = std::make_unique<hw>();
  auto& topo = t->hw_->topo;
  if (hwloc_topology_init(&topo) != 0)
    throw std::runtime_error("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0)
    throw std::runtime_error(
      fmt::format("hwloc could not load the topology: {}", std::strerror(errno)));
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != nullptr)
    t->numa_.push_back(
      {node->os_index, node->attr ? node->attr->numanode.local_memory : 0, {}});
  if (t->numa_.empty())
    t->numa_.push_back({0, 0, {}});
  int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < ncores; ++i) {
    auto* core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    auto* pu = hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, 0);
    if (pu == nullptr)
      continue;
    bool known = false;
    core_info c{static_cast<uint32_t>(t->cores_.size()), pu->os_index,
                numa_of_cpuset(topo, core->cpuset, known)};
    t->cores_.push_back(c);
    for (auto& n : t->numa_)
      if (n.os_index == c.numa)
        n.cores.push_back(c.index);
  }
  hwloc_obj_t dev = nullptr;
  while ((dev = hwloc_get_next_osdev(topo, dev)) != nullptr) {
    auto type = dev->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS)
      continue;
    auto* anc = hwloc_get_non_io_ancestor_obj(topo, dev);
    bool known = false;
    auto numa = numa_of_cpuset(topo, anc != nullptr ? anc->cpuset : nullptr, known);
    // A cpuset covering the whole machine says nothing about locality.
    if (anc != nullptr
        && hwloc_bitmap_isequal(anc->cpuset, hwloc_topology_get_topology_cpuset(topo))
        && t->numa_.size() > 1)
      known = false;
    t->nics_.push_back(
      {dev->name, type == HWLOC_OBJ_OSDEV_NETWORK ? "network" : "rdma", numa, known, {}});
  }
  add_addresses(t->nics_);
  return t;
}

std::shared_ptr<const topology> topology::describe_machine(std::vector<numa_info> numa,
                                                           std::vector<core_info> cores,
                                                           std::vector<nic_info> nics) {
  std::shared_ptr<topology> t{new topology()};
  t->numa_ = std::move(numa);
  t->cores_ = std::move(cores);
  t->nics_ = std::move(nics);
  return t;
}

const numa_info* topology::numa(uint32_t os_index) const noexcept {
  for (auto& n : numa_)
    if (n.os_index == os_index)
      return &n;
  return nullptr;
}

const core_info* topology::core_by_cpu(uint32_t os_cpu) const noexcept {
  for (auto& c : cores_)
    if (c.os_cpu == os_cpu)
      return &c;
  return nullptr;
}

const nic_info* topology::nic(const std::string& name) const noexcept {
  for (auto& n : nics_)
    if (n.name == name)
      return &n;
  return nullptr;
}

const nic_info* topology::nic_for_address(const std::string& host) const noexcept {
  for (auto& n : nics_)
    for (auto& a : n.ipv4)
      if (a == host)
        return &n;
  return nullptr;
}

void topology::pin_current_thread(const core_info& core) const {
  if (!hw_)
    throw std::runtime_error("a described machine cannot pin threads");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, core.os_cpu);
  int rc = hwloc_set_cpubind(hw_->topo, set, HWLOC_CPUBIND_THREAD);
  int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0)
    throw std::runtime_error(
      fmt::format("cannot pin a thread to CPU {}: {}", core.os_cpu, std::strerror(err)));
}

std::string topology::describe() const {
  std::string numa;
  for (auto& n : numa_)
    numa += fmt::format("{}{}({} cores, {} MiB)", numa.empty() ? "" : " ", n.os_index,
                        n.cores.size(), n.memory_bytes >> 20);
  std::string nics;
  for (auto& n : nics_)
    nics += fmt::format("{}{}[{}{}]", nics.empty() ? "" : " ", n.name,
                        n.numa_known ? "numa " : "numa ?",
                        n.numa_known ? std::to_string(n.numa) : "");
  return fmt::format("numa=[{}] cores={} nics=[{}]", numa, cores_.size(), nics);
}

int current_cpu() noexcept {
  return sched_getcpu();
}

std::vector<int> current_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return out;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set))
      out.push_back(i);
  return out;
}

int numa_node_of(const void* p) noexcept {
  int node = -1;
  auto page = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  if (get_mempolicy(&node, nullptr, 0, reinterpret_cast<void*>(page),
                    MPOL_F_NODE | MPOL_F_ADDR)
      != 0)
    return -1;
  return node;
}

numa_region::numa_region(size_t bytes, uint32_t numa) : size_(bytes) {
  if (bytes == 0)
    return;
  if (numa_available() >= 0 && static_cast<int>(numa) <= numa_max_node()) {
    data_ = static_cast<std::byte*>(numa_alloc_onnode(bytes, static_cast<int>(numa)));
    numa_ = true;
  } else {
    data_ = static_cast<std::byte*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (data_ == MAP_FAILED)
      data_ = nullptr;
  }
  if (data_ == nullptr)
    throw std::bad_alloc();
  std::memset(data_, 0, bytes); // touch now: pages land on the domain asked for
}

numa_region::~numa_region() {
  if (data_ == nullptr)
    return;
  if (numa_)
    numa_free(data_, size_);
  else
    munmap(data_, size_);
}

numa_region::numa_region(numa_region&& other) noexcept
  : data_(other.data_), size_(other.size_), numa_(other.numa_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

numa_region& numa_region::operator=(numa_region&& other) noexcept {
  if (this != &other) {
    this->~numa_region();
    new (this) numa_region(std::move(other));
  }
  return *this;
}

} // namespace rw::runtime
