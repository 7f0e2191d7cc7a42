#include "runtime/checkpoint/files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

namespace rw::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw checkpoint_error(
    fmt::format("checkpoint: {} '{}': {}", what, path, std::strerror(errno)));
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

// Closes `fd` (and removes `unlink_path` if given) keeping errno for fail_errno.
void close_keeping_errno(int fd, const std::string& unlink_path = {}) {
  int saved = errno;
  ::close(fd);
  if (!unlink_path.empty())
    ::unlink(unlink_path.c_str());
  errno = saved;
}

// mkdir -p with mode 0700 for what it creates. The parents may be links (the caller
// confined the path: runtime/checkpoint/root.hpp); the last component is `dir` itself.
// Returns whether `dir` was created here.
bool make_dirs(const std::string& dir) {
  fs::path path{dir};
  fs::path prefix;
  bool created = false;
  for (auto& part : path) {
    prefix /= part;
    if (part.empty() || part == "/")
      continue;
    created = ::mkdir(prefix.c_str(), 0700) == 0;
    if (!created && errno != EEXIST)
      fail_errno("cannot create directory", prefix.string());
  }
  return created;
}

// An existing `dir`: a directory, not a symbolic link to one.
void check_real_dir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    fail_errno("cannot look at", dir);
  if (S_ISLNK(st.st_mode))
    throw checkpoint_error(fmt::format(
      "checkpoint: '{}' is a symbolic link: give the directory itself (a link could lead "
      "the node's writes anywhere)",
      dir));
  if (!S_ISDIR(st.st_mode))
    throw checkpoint_error(
      fmt::format("checkpoint: '{}' exists and is not a directory", dir));
}

bool is_empty_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    fail_errno("cannot list directory", dir);
  bool empty = true;
  while (auto* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

// A stale `tmp` left by a writer that crashed: removed if it is our regular file;
// anything else (a link, another user's file, a directory) is refused.
void clear_stale(const std::string& tmp) {
  struct stat st {};
  if (::lstat(tmp.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return;
    fail_errno("cannot look at", tmp);
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
    throw checkpoint_error(fmt::format(
      "checkpoint: '{}' exists and is {}: refusing to write through it (someone else put "
      "it there); remove it or choose another directory",
      tmp,
      S_ISLNK(st.st_mode)   ? "a symbolic link"
      : S_ISREG(st.st_mode) ? "another user's file"
                            : "not a regular file"));
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT)
    fail_errno("cannot remove the stale temporary file", tmp);
}

} // namespace

void prepare_dir(const std::string& dir) {
  if (!make_dirs(dir)) {
    check_real_dir(dir);
    if (!is_empty_dir(dir))
      throw checkpoint_error(fmt::format(
        "checkpoint: directory '{}' exists and is not empty: it holds another run's "
        "checkpoint or other files; give a new or empty one",
        dir));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail_errno("cannot write into directory", dir);
}

void prepare_part_dir(const std::string& dir) {
  if (!make_dirs(dir)) {
    check_real_dir(dir);
    struct stat st {};
    auto manifest = (fs::path{dir} / "MANIFEST").string();
    if (::lstat(manifest.c_str(), &st) == 0)
      throw checkpoint_error(fmt::format(
        "checkpoint: directory '{}' holds a complete checkpoint already (a MANIFEST): "
        "another run's; give the job a new or empty checkpoint_dir",
        dir));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail_errno("cannot write into directory", dir);
}

void write_atomic(const std::string& dir, const std::string& name,
                  const std::vector<uint8_t>& bytes) {
  auto final_path = (fs::path{dir} / name).string();
  auto tmp_path = final_path + ".tmp";
  clear_stale(tmp_path);
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
  if (fd < 0)
    fail_errno("cannot create", tmp_path);
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      close_keeping_errno(fd, tmp_path);
      fail_errno("cannot write", tmp_path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    close_keeping_errno(fd, tmp_path);
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

std::vector<uint8_t> read_all(const std::string& dir, const std::string& name,
                              uint64_t max_bytes) {
  auto path = (fs::path{dir} / name).string();
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      throw checkpoint_error(
        fmt::format("checkpoint: '{}' is a symbolic link: refused (a "
                    "checkpoint's files are regular files)",
                    path));
    fail_errno("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    close_keeping_errno(fd);
    fail_errno("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw checkpoint_error(fmt::format("checkpoint: '{}' is not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw checkpoint_error(
      fmt::format("checkpoint: '{}' is {} bytes, more than the {} it "
                  "may hold: refused unread",
                  path, st.st_size, max_bytes));
  }
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  size_t done = 0;
  for (;;) {
    if (done == out.size()) { // grown since fstat? one more byte says so
      if (out.size() >= max_bytes)
        break;
      out.resize(std::min<uint64_t>(max_bytes, out.size() + (1 << 16)));
    }
    auto n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      close_keeping_errno(fd);
      fail_errno("cannot read", path);
    }
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  uint8_t extra = 0;
  bool more = done == max_bytes && ::read(fd, &extra, 1) == 1;
  ::close(fd);
  if (more)
    throw checkpoint_error(
      fmt::format("checkpoint: '{}' holds more than the {} bytes it may "
                  "hold: refused",
                  path, max_bytes));
  out.resize(done);
  return out;
}

uint64_t checksum(const std::vector<uint8_t>& bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

} // namespace rw::runtime::checkpoint
