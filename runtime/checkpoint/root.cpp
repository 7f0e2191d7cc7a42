#include "runtime/checkpoint/root.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>

#include "runtime/checkpoint/files.hpp"

namespace rw::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

// realpath(3), or "" with errno set.
std::string real(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr)
    return {};
  return buf;
}

bool exists_no_follow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_under(const std::string& path, const std::string& root) {
  if (root == "/")
    return !path.empty() && path.front() == '/';
  return path == root
         || (path.size() > root.size() && path.compare(0, root.size(), root) == 0
             && path[root.size()] == '/');
}

} // namespace

checkpoint_root::checkpoint_root(const std::string& root) {
  if (root.empty())
    return;
  auto canonical = real(root);
  struct stat st {};
  if (canonical.empty() || ::stat(canonical.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw checkpoint_error(fmt::format("--checkpoint-root '{}' is not an existing "
                                       "directory{}{}: create it (for the node's "
                                       "user, chmod 700) or give another",
                                       root, canonical.empty() ? ": " : "",
                                       canonical.empty() ? std::strerror(errno) : ""));
  root_ = canonical;
}

std::string checkpoint_root::resolve(const std::string& path,
                                     const std::string& what) const {
  if (root_.empty())
    throw checkpoint_error(fmt::format(
      "{} '{}' refused: this node has no --checkpoint-root (config key "
      "checkpoint.root), so it takes no checkpoint or restore paths; start rw-node with "
      "--checkpoint-root DIR and give paths under DIR (or relative to it)",
      what, path));
  if (path.empty())
    throw checkpoint_error(fmt::format("{}: give a directory", what));
  fs::path full = fs::path{path}.is_absolute() ? fs::path{path} : fs::path{root_} / path;
  // The longest prefix that exists (lstat: a dangling link exists, and is refused below
  // when realpath cannot follow it).
  std::vector<fs::path> parts(full.begin(), full.end());
  fs::path prefix;
  size_t k = 0;
  for (; k < parts.size(); ++k) {
    auto next = prefix / parts[k];
    if (!exists_no_follow(next.string()))
      break;
    prefix = next;
  }
  auto resolved = real(prefix.string());
  if (resolved.empty())
    throw checkpoint_error(fmt::format("{} '{}' refused: '{}' cannot be resolved ({}): a "
                                       "symbolic link that leads nowhere?",
                                       what, path, prefix.string(),
                                       std::strerror(errno)));
  fs::path out{resolved};
  for (; k < parts.size(); ++k) {
    if (parts[k] == "..")
      out = out.parent_path();
    else if (parts[k] != "." && !parts[k].empty())
      out /= parts[k];
  }
  auto result = out.lexically_normal().string();
  while (result.size() > 1 && result.back() == '/')
    result.pop_back();
  if (!is_under(result, root_))
    throw checkpoint_error(fmt::format(
      "{} '{}' refused: it resolves to '{}', outside this node's --checkpoint-root '{}' "
      "(a '..' or a symbolic link leads out of it, or the path is elsewhere); give a "
      "path "
      "under the root",
      what, path, result, root_));
  return result;
}

} // namespace rw::runtime::checkpoint
