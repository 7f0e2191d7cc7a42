#include "runtime/process_stats.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace rw::runtime {

namespace {

uint64_t count_entries(const char* dir) {
  uint64_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (auto* e = readdir(d))
      if (e->d_name[0] != '.')
        ++n;
    closedir(d);
  }
  return n;
}

} // namespace

process_stats read_process_stats() {
  process_stats s;
  long page = sysconf(_SC_PAGESIZE);
  std::ifstream statm{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  if (statm >> size >> resident)
    s.rss_bytes = resident * static_cast<uint64_t>(page);
  // The fd directory's own descriptor is in it while it is read: not one of ours.
  auto fds = count_entries("/proc/self/fd");
  s.open_fds = fds > 0 ? fds - 1 : 0;
  s.threads = count_entries("/proc/self/task");
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0)
    s.max_fds = r.rlim_cur == RLIM_INFINITY ? 0 : static_cast<uint64_t>(r.rlim_cur);
  std::ifstream stat{"/proc/self/stat"};
  std::string line;
  if (std::getline(stat, line)) {
    // Fields after the command (in parentheses, which may hold spaces): utime is the
    // 14th field of the line, stime the 15th.
    auto close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest{line.substr(close + 2)};
      std::string field;
      uint64_t utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14)
          utime = std::stoull(field);
        else if (i == 15)
          stime = std::stoull(field);
      }
      s.cpu_seconds = static_cast<double>(utime + stime)
                      / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  return s;
}

} // namespace rw::runtime
