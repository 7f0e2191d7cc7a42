#include "services/probe.hpp"

#include <algorithm>

#include <unistd.h>

#include "services/tcp_names.hpp"

namespace rw::services {

std::optional<double> connect_round_trip(const std::string& node, unsigned samples,
                                         std::chrono::milliseconds timeout) {
  std::optional<double> best;
  address where;
  try {
    where = parse_address(node);
  } catch (const std::exception&) {
    return best;
  }
  for (unsigned i = 0; i < samples; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    int fd = -1;
    try {
      fd = connect_to(where, timeout);
    } catch (const std::exception&) {
      continue;
    }
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now()
                                                        - t0)
                .count();
    ::close(fd);
    best = best ? std::min(*best, ms) : ms;
  }
  return best;
}

} // namespace rw::services
