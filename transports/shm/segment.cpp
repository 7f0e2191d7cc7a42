#include "transports/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <new>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::transports::shm {

namespace {

constexpr uint64_t bell_magic = 0x4c4c4542'57524e44ull; // "DNRWBELL"

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

std::string fresh_name(const char* kind) {
  std::random_device rd;
  return fmt::format("/rackweave-{}-{}-{:016x}", kind, getpid(),
                     (uint64_t{rd()} << 32) | rd());
}

} // namespace

mapping mapping::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    throw sys_error("cannot create shared memory " + name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    auto err = sys_error("cannot size shared memory " + name);
    ::close(fd);
    shm_unlink(name.c_str());
    throw err;
  }
  // ftruncate only sets the size: on a /dev/shm smaller than the segment (a container's
  // default is 64 MiB) the first touch of a page past its end would kill this process
  // with SIGBUS. Reserve every page now, so a full /dev/shm is an error, not a crash.
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    struct statvfs fs {};
    std::string room = fstatvfs(fd, &fs) == 0
                         ? fmt::format("{:.1f} MiB free of {:.1f} MiB",
                                       double(fs.f_bavail) * fs.f_frsize / (1 << 20),
                                       double(fs.f_blocks) * fs.f_frsize / (1 << 20))
                         : std::string("its room unknown");
    ::close(fd);
    shm_unlink(name.c_str());
    throw std::runtime_error(
      fmt::format("cannot reserve {:.1f} MiB of shared memory for {}: {} (/dev/shm: {}; "
                  "a container's "
                  "is often 64 MiB: raise it, e.g. docker --shm-size)",
                  double(bytes) / (1 << 20), name, std::strerror(rc), room));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    auto err = sys_error("cannot map shared memory " + name);
    shm_unlink(name.c_str());
    throw err;
  }
  mapping m;
  m.name_ = name;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  m.linked_ = true;
  return m;
}

mapping mapping::open(const std::string& name, bool read_only) {
  int fd = shm_open(name.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
  if (fd < 0)
    throw sys_error("cannot open shared memory " + name);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    throw std::runtime_error("shared memory " + name + " is empty");
  }
  auto bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    throw sys_error("cannot map shared memory " + name);
  mapping m;
  m.name_ = name;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  return m;
}

mapping mapping::create_sealed(const char* label, size_t bytes) {
  int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    throw sys_error(fmt::format("cannot create shared memory ({})", label));
  auto fail = [&](const std::string& what) {
    auto err = sys_error(what);
    ::close(fd);
    return err;
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    throw fail(fmt::format("cannot size shared memory ({}, {} bytes)", label, bytes));
  // Every page now: memory that runs out is an error here, not a SIGBUS later.
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    errno = rc;
    throw fail(fmt::format("cannot reserve {:.1f} MiB of shared memory ({})",
                           double(bytes) / (1 << 20), label));
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw fail(fmt::format("cannot seal shared memory ({})", label));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw fail(fmt::format("cannot map shared memory ({})", label));
  mapping m;
  m.name_ = fmt::format("/proc/{}/fd/{}", getpid(), fd);
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  m.fd_ = fd;
  return m;
}

mapping mapping::open_sealed(const std::string& name) {
  unsigned pid = 0, fd_number = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "/proc/%u/fd/%u%c", &pid, &fd_number, &tail) != 2
      || name != fmt::format("/proc/{}/fd/{}", pid, fd_number))
    throw std::runtime_error(fmt::format(
      "'{}' is not sealed shared memory (/proc/PID/fd/N of the worker's memfd); a "
      "segment by name (/rackweave-worker-...) is refused: a worker could truncate it "
      "under the node (a worker older than this node: upgrade it)",
      name.substr(0, 96)));
  int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    throw sys_error("cannot open the worker's shared memory " + name);
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    ::close(fd);
    throw std::runtime_error(fmt::format(
      "the shared memory {} is not sealed against shrinking: its owner could truncate "
      "it under this node (a SIGBUS)",
      name));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    throw std::runtime_error("shared memory " + name + " is empty");
  }
  auto bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    throw sys_error("cannot map shared memory " + name);
  mapping m;
  m.name_ = name;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  return m;
}

mapping::mapping(mapping&& other) noexcept
  : name_(std::move(other.name_)), data_(other.data_), size_(other.size_),
    linked_(other.linked_), fd_(other.fd_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.linked_ = false;
  other.fd_ = -1;
}

mapping& mapping::operator=(mapping&& other) noexcept {
  if (this != &other) {
    this->~mapping();
    new (this) mapping(std::move(other));
  }
  return *this;
}

mapping::~mapping() {
  if (linked_)
    shm_unlink(name_.c_str()); // a creator that still holds the name removes it
  if (fd_ >= 0)
    ::close(fd_);
  if (data_ != nullptr)
    munmap(data_, size_);
}

void mapping::unlink() noexcept {
  if (fd_ >= 0) { // sealed memory: its name is the open memfd
    ::close(fd_);
    fd_ = -1;
    return;
  }
  if (linked_ || !name_.empty())
    shm_unlink(name_.c_str());
  linked_ = false;
}

std::vector<tensor_entry> plan_regions(const job_spec& spec, size_t& total_bytes) {
  std::vector<tensor_entry> out;
  size_t offset = align_up(
    tensor_table_offset() + spec.tensors.size() * sizeof(tensor_entry), region_align);
  for (auto& t : spec.tensors) {
    auto bytes = align_up(t.elements * sizeof(float), region_align);
    tensor_entry e{t.elements, offset, offset + bytes};
    offset += 2 * bytes;
    out.push_back(e);
  }
  total_bytes = offset;
  return out;
}

std::vector<uint64_t> plan_params(const job_spec& spec, size_t& total_bytes) {
  std::vector<uint64_t> offsets;
  size_t offset = 0;
  for (auto& t : spec.tensors) {
    offsets.push_back(offset);
    offset += align_up(t.elements * sizeof(float), region_align);
  }
  total_bytes = std::max<size_t>(offset, region_align);
  return offsets;
}

mapping create_params_segment(const job_spec& spec) {
  size_t total = 0;
  plan_params(spec, total);
  return mapping::create(fresh_name("params"), total);
}

mapping open_params_segment(const std::string& name, const job_spec& spec) {
  if (name.rfind("/rackweave-params-", 0) != 0 || name.find('/', 1) != std::string::npos)
    throw std::runtime_error(
      fmt::format("'{}' is not a RackWeave parameter segment", name));
  size_t total = 0;
  plan_params(spec, total);
  auto m = mapping::open(name, true);
  if (m.size() != total)
    throw std::runtime_error("the node's parameter segment does not match the job spec");
  return m;
}

mapping create_worker_segment(const job_spec& spec, uint64_t nonce) {
  size_t total = 0;
  auto regions = plan_regions(spec, total);
  auto m = mapping::create_sealed("rackweave-worker", total);
  auto* h = new (m.data()) header();
  h->magic = segment_magic;
  h->nonce = nonce;
  h->total_bytes = total;
  h->num_tensors = static_cast<uint32_t>(regions.size());
  h->chunk_bytes = spec.chunk_bytes;
  std::memcpy(tensor_table(h), regions.data(), regions.size() * sizeof(tensor_entry));
  return m;
}

mapping open_worker_segment(const std::string& name, uint64_t nonce,
                            const job_spec& spec) {
  auto m = mapping::open_sealed(name);
  if (m.size() < sizeof(header))
    throw std::runtime_error("the worker's shared memory is too small for its header");
  auto* h = m.as<header>();
  size_t total = 0;
  auto regions = plan_regions(spec, total);
  if (h->magic != segment_magic || h->nonce != nonce)
    throw std::runtime_error("the worker's shared memory is not the one its hello names");
  if (h->total_bytes != total || m.size() != total || h->num_tensors != regions.size()
      || h->chunk_bytes != spec.chunk_bytes
      || std::memcmp(tensor_table(h), regions.data(),
                     regions.size() * sizeof(tensor_entry))
           != 0)
    throw std::runtime_error("the worker's shared memory does not match its job spec");
  return m;
}

int remove_stale_segments() {
  int removed = 0;
  auto* dir = opendir("/dev/shm");
  if (dir == nullptr)
    return 0;
  while (auto* e = readdir(dir)) {
    // rackweave-<kind>-<pid>-<random>
    unsigned pid = 0;
    char kind[16] = {};
    if (std::sscanf(e->d_name, "rackweave-%15[a-z]-%u-", kind, &pid) != 2 || pid == 0)
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue; // alive (or not ours to judge)
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0)
      ++removed;
  }
  closedir(dir);
  return removed;
}

mapping create_node_bell() {
  auto m = mapping::create(fresh_name("node"), sizeof(node_bell_segment));
  auto* s = new (m.data()) node_bell_segment();
  s->magic = bell_magic;
  return m;
}

mapping open_node_bell(const std::string& name) {
  auto m = mapping::open(name);
  if (m.size() < sizeof(node_bell_segment)
      || m.as<node_bell_segment>()->magic != bell_magic)
    throw std::runtime_error("shared memory " + name
                             + " is not a RackWeave node doorbell");
  return m;
}

} // namespace rw::transports::shm
