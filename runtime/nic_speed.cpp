#include "runtime/nic_speed.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <fstream>
#include <memory>

namespace rw::runtime {

namespace {

// The device holding IPv4 address `host`, or "".
std::string device_of(const std::string& host) {
  in_addr want{};
  if (inet_pton(AF_INET, host.c_str(), &want) != 1 || want.s_addr == INADDR_ANY)
    return {};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    return {};
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> guard{list, freeifaddrs};
  for (auto* i = list; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET
        && reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr)
      return i->ifa_name;
  return {};
}

} // namespace

nic_speed device_speed(const std::string& device, const std::string& sysfs_net) {
  nic_speed out;
  out.device = device;
  std::ifstream in{sysfs_net + "/" + device + "/speed"};
  long mbps = 0;
  if (!(in >> mbps)) {
    out.why = device + " reports no link speed";
    return out;
  }
  if (mbps <= 0) {
    out.why = device + " reports an unknown link speed (down?)";
    return out;
  }
  out.gbps = static_cast<double>(mbps) / 1000.0;
  return out;
}

nic_speed nic_speed_for(const std::string& host, const std::string& sysfs_net) {
  auto device = device_of(host);
  if (device.empty()) {
    nic_speed out;
    out.why = "no single network device holds " + (host.empty() ? "*" : host);
    return out;
  }
  return device_speed(device, sysfs_net);
}

} // namespace rw::runtime
