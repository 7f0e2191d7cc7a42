#include "transports/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

} // namespace

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

mapping mapping::open_sealed(const std::string& name, const std::string& what,
                             bool read_only) {
  unsigned pid = 0, fd_number = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "/proc/%u/fd/%u%c", &pid, &fd_number, &tail) != 2
      || name != fmt::format("/proc/{}/fd/{}", pid, fd_number))
    throw std::runtime_error(fmt::format(
      "'{}' is not sealed shared memory (/proc/PID/fd/N of {}'s memfd); a "
      "segment by name (/rackweave-...) is refused: its owner could truncate it "
      "under this process (a peer older than this one: upgrade it)",
      name.substr(0, 96), what));
  int fd = ::open(name.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd < 0)
    throw sys_error(fmt::format("cannot open {}'s shared memory {} (both processes must "
                                "see each other's: one PID namespace, one user)",
                                what, name));
  auto m = adopt_sealed(fd, what + " (" + name + ")", read_only);
  m.name_ = name;
  return m;
}

mapping mapping::adopt_sealed(int fd, const std::string& what, bool read_only) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    ::close(fd);
    throw std::runtime_error(
      fmt::format("{}'s shared memory is not sealed against shrinking: its owner could "
                  "truncate it under this process (a SIGBUS)",
                  what));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    throw std::runtime_error(what + "'s shared memory is empty");
  }
  auto bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    throw sys_error(fmt::format("cannot map {}'s shared memory", what));
  mapping m;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = bytes;
  return m;
}

mapping::mapping(mapping&& other) noexcept
  : name_(std::move(other.name_)), data_(other.data_), size_(other.size_),
    fd_(other.fd_) {
  other.data_ = nullptr;
  other.size_ = 0;
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
  if (fd_ >= 0)
    ::close(fd_);
  if (data_ != nullptr)
    munmap(data_, size_);
}

void mapping::unlink() noexcept {
  if (fd_ >= 0) { // the name is the open memfd
    ::close(fd_);
    fd_ = -1;
  }
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
  return mapping::create_sealed("rackweave-params", total);
}

mapping adopt_params_segment(int fd, const job_spec& spec) {
  size_t total = 0;
  plan_params(spec, total);
  auto m = mapping::adopt_sealed(fd, "the node's parameter segment", true);
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
  auto m = mapping::open_sealed(name, "the worker");
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
  auto m = mapping::create_sealed("rackweave-node", sizeof(node_bell_segment));
  auto* s = new (m.data()) node_bell_segment();
  s->magic = bell_magic;
  return m;
}

mapping adopt_node_bell(int fd) {
  auto m = mapping::adopt_sealed(fd, "the node's doorbell");
  if (m.size() < sizeof(node_bell_segment)
      || m.as<node_bell_segment>()->magic != bell_magic)
    throw std::runtime_error("the node handed over shared memory that is not a "
                             "RackWeave node doorbell");
  return m;
}

} // namespace rw::transports::shm
