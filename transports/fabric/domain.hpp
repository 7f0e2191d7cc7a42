#pragma once
// A libfabric provider opened for RackWeave: the fabric and the domain of one NIC, with
// what the data path needs checked once (reliable datagram endpoints, messages and RMA
// writes carrying 32 bits of immediate data, thread-safe use) and the provider's memory
// registration rules read from what it granted. Shared by a node's fabric endpoint and
// a worker's.
//
// Providers: "verbs" (rdma-core: InfiniBand, RoCE; through ofi_rxm), "efa" (AWS),
// "tcp" (through ofi_rxm: how it is tested without RDMA hardware), or "auto" (the first
// of those fi_getinfo offers).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct fi_info;
struct fid_fabric;
struct fid_domain;

namespace rw::transports::fabric {

/// How an update can be written straight into the receiver's memory while its header
/// still lands in a slot: one write to two remote places (`scatter`: the provider
/// takes two RMA targets per write), two writes placed in the order posted
/// (`ordered`: FI_ORDER_WAW), or not at all (`off`: the payload goes into the slot).
enum class placement : uint8_t { off = 0, ordered = 1, scatter = 2 };
const char* to_string(placement p) noexcept;

/// The provider names accepted by --fabric (besides "off").
bool known_provider(const std::string& name);

class domain {
public:
  /// Opens `provider` (auto, verbs, efa or tcp) on the interface of `source_host` (""
  /// for the provider's default). Throws rw::error(errc::unavailable) naming what is
  /// missing: no such provider on this machine, or one that lacks a needed capability.
  static std::shared_ptr<domain> open(const std::string& provider,
                                      const std::string& source_host = {});
  /// One domain per NIC of `provider` (a short name: verbs, efa, tcp): every one it
  /// offers for {"all"}, else the ones named (a name it lacks is an error listing the
  /// NICs it has). Throws rw::error.
  static std::vector<std::shared_ptr<domain>> open_nics(
    const std::string& provider, const std::vector<std::string>& nics);
  /// Another domain on the same NIC, opened as this one was: its own progress and
  /// registrations (a node's second, third ... endpoint on a NIC). Throws rw::error.
  std::shared_ptr<domain> again() const;
  ~domain();

  domain(const domain&) = delete;
  domain& operator=(const domain&) = delete;

  fi_info* info() const noexcept { return info_; }
  fid_domain* handle() const noexcept { return domain_; }
  /// The provider's full name ("tcp;ofi_rxm") and the short one a peer matches ("tcp").
  const std::string& provider_name() const noexcept { return provider_name_; }
  const std::string& provider() const noexcept { return short_name_; }
  /// The NIC (its device or interface name, "" if the provider does not say) and its
  /// NUMA domain (-1: unknown), from the provider's NIC attributes and hwloc.
  const std::string& nic() const noexcept { return nic_; }
  int numa() const noexcept { return numa_; }

  /// Registration rules granted: remote addresses are virtual addresses, the provider
  /// picks keys. (Descriptors are always passed, so FI_MR_LOCAL needs nothing more; a
  /// write's immediate that consumed a posted receive (FI_RX_CQ_DATA) is recognised by
  /// its context.)
  bool mr_virt_addr() const noexcept;
  bool mr_prov_key() const noexcept;
  /// Local pieces one write may gather.
  size_t iov_limit() const noexcept;
  /// The most bytes one inject (fi_injectdata) may carry.
  size_t inject_size() const noexcept;
  /// The best placement of results the provider allows.
  fabric::placement placement() const noexcept;
  /// A key for a new registration when the application picks them: random within the
  /// provider's key size, so a peer that holds one key cannot guess another (each
  /// connection's receive window has its own; slot_pool). Thread-safe.
  uint64_t next_key() noexcept;

  /// "provider=tcp;ofi_rxm fabric=... domain=... nic=lo numa=0".
  std::string describe() const;

private:
  domain() = default;
  static std::shared_ptr<domain> make(const fi_info* pick, const std::string& short_name);
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  std::string provider_name_;
  std::string short_name_;
  std::string nic_;
  int numa_ = -1;
};

/// libfabric's text for a negative return code.
std::string fi_error_text(long rc);

} // namespace rw::transports::fabric
