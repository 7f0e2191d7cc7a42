#include "runtime/checkpoint/files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

namespace rw::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw checkpoint_error(fmt::format("checkpoint: {} '{}': {}", what, path,
                                     std::strerror(errno)));
}

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0)
    fail_errno("cannot open", path);
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail_errno("cannot fsync", path);
  }
  ::close(fd);
}

} // namespace

void prepare_dir(const std::string& dir) {
  std::error_code ec;
  auto st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw checkpoint_error(fmt::format("checkpoint: '{}' exists and is not a directory", dir));
    if (!fs::is_empty(dir, ec) || ec)
      throw checkpoint_error(fmt::format(
        "checkpoint: directory '{}' exists and is not empty; give a new or empty one", dir));
  } else if (!fs::create_directories(dir, ec) || ec) {
    throw checkpoint_error(fmt::format("checkpoint: cannot create directory '{}': {}", dir,
                                       ec ? ec.message() : "unknown reason"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail_errno("cannot write into directory", dir);
}

void write_atomic(const std::string& dir, const std::string& name,
                  const std::vector<uint8_t>& bytes) {
  auto final_path = (fs::path{dir} / name).string();
  auto tmp_path = final_path + ".tmp";
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail_errno("cannot create", tmp_path);
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int saved = errno;
      ::close(fd);
      ::unlink(tmp_path.c_str());
      errno = saved;
      fail_errno("cannot write", tmp_path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int saved = errno;
    ::close(fd);
    ::unlink(tmp_path.c_str());
    errno = saved;
    fail_errno("cannot fsync", tmp_path);
  }
  ::close(fd);
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp_path.c_str());
    errno = saved;
    fail_errno("cannot rename into place", final_path);
  }
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

std::vector<uint8_t> read_all(const std::string& dir, const std::string& name) {
  auto path = (fs::path{dir} / name).string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail_errno("cannot open", path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      fail_errno("cannot read", path);
    }
    if (n == 0)
      break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

uint64_t checksum(const std::vector<uint8_t>& bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

} // namespace rw::runtime::checkpoint
