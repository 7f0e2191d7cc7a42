#pragma once
// The link speed a network device reports (/sys/class/net/DEV/speed, in Mbit/s), for
// the device that carries a given IPv4 address. The one place that reads sysfs for
// it. Virtual devices (loopback, most bridges and tunnels) report none; a device
// that is down reports -1: both are "unknown".

#include <string>

namespace rw::runtime {

struct nic_speed {
  std::string device; // the device holding the address ("" if none does)
  double gbps = 0;    // 0: unknown
  std::string why;    // why it is unknown, for the log
};

/// The speed of the device whose IPv4 address is `host` (a dotted quad). A wildcard
/// or unknown address has no device. `sysfs_net` is where the devices' directories
/// are (tests point it elsewhere).
nic_speed nic_speed_for(const std::string& host,
                        const std::string& sysfs_net = "/sys/class/net");

/// The speed of device `device` from `sysfs_net`/DEV/speed.
nic_speed device_speed(const std::string& device,
                       const std::string& sysfs_net = "/sys/class/net");

} // namespace rw::runtime
