#pragma once
// What this machine is made of, and where threads run and memory lives. The one module
// that talks to hwloc and libnuma: no other file includes their headers.
//
// Discovery (hwloc): NUMA domains, cores (one PU each, the first hardware thread),
// network devices and RDMA devices with their NUMA domain when the platform says (a
// virtual NIC often has none; it then counts as domain 0 and `numa_known` is false).
// Placement: pin the calling thread to a core (hwloc cpubind). Memory: allocate on a
// NUMA domain (libnuma), ask which domain holds an address (get_mempolicy).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rw::runtime {

struct core_info {
  uint32_t index = 0;  // position in topology::cores()
  uint32_t os_cpu = 0; // the OS's number for the core's first hardware thread
  uint32_t numa = 0;   // OS index of its NUMA domain
};

struct numa_info {
  uint32_t os_index = 0;
  uint64_t memory_bytes = 0;
  std::vector<uint32_t> cores; // indexes into topology::cores()
};

struct nic_info {
  std::string name; // "eth0", "mlx5_0"
  std::string kind; // "network" or "rdma"
  uint32_t numa = 0;
  bool numa_known = false; // false: the platform gave no locality; treated as domain 0
  std::vector<std::string> ipv4;
};

class topology {
public:
  /// Discovers this machine. Throws std::runtime_error if hwloc cannot.
  static std::shared_ptr<const topology> discover();
  /// A described machine, for planning tests; it cannot pin threads.
  static std::shared_ptr<const topology> describe_machine(std::vector<numa_info> numa,
                                                          std::vector<core_info> cores,
                                                          std::vector<nic_info> nics);
  ~topology();

  const std::vector<numa_info>& numa_nodes() const noexcept { return numa_; }
  const std::vector<core_info>& cores() const noexcept { return cores_; }
  const std::vector<nic_info>& nics() const noexcept { return nics_; }

  const numa_info* numa(uint32_t os_index) const noexcept;
  const core_info* core_by_cpu(uint32_t os_cpu) const noexcept;
  const nic_info* nic(const std::string& name) const noexcept;
  /// The network device holding IPv4 address `host` (null for unknown or wildcard).
  const nic_info* nic_for_address(const std::string& host) const noexcept;

  /// Pins the calling thread to `core`. Throws std::runtime_error on failure.
  void pin_current_thread(const core_info& core) const;

  /// One line for the node's start-up log.
  std::string describe() const;

private:
  topology() = default;
  struct hw;
  std::unique_ptr<hw> hw_;
  std::vector<numa_info> numa_;
  std::vector<core_info> cores_;
  std::vector<nic_info> nics_;
};

/// The CPU the calling thread runs on right now.
int current_cpu() noexcept;

/// The CPUs the calling thread may run on.
std::vector<int> current_affinity();

/// The NUMA domain holding the page at `p` (touched memory only), or -1 if unknown.
int numa_node_of(const void* p) noexcept;

/// A page-aligned region allocated on one NUMA domain (libnuma), zeroed, freed on
/// destruction. Without NUMA support it is ordinary memory.
class numa_region {
public:
  numa_region() = default;
  numa_region(size_t bytes, uint32_t numa);
  ~numa_region();
  numa_region(numa_region&& other) noexcept;
  numa_region& operator=(numa_region&& other) noexcept;
  numa_region(const numa_region&) = delete;
  numa_region& operator=(const numa_region&) = delete;

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool numa_ = false;
};

} // namespace rw::runtime
