#pragma once
// Where a node takes checkpoints and restores from: every path a shell, a job spec or
// the coordinator names (rw.checkpoint's directory, a job's restore and checkpoint_dir)
// must lie under the node's --checkpoint-root. Without a root the node takes no such
// path at all: checkpoint paths are files the node writes as its own user, and the
// control plane may be reached by more people than that user.
//
// A path is resolved before it is judged: a relative one is taken under the root; the
// longest part of it that exists is canonicalised (realpath: its `..` and symbolic
// links followed), and the rest, which does not exist yet, is normalised lexically
// (`..` there drops the component before it). What comes out must be the root or lie
// under it; it is the path the node then uses.

#include <string>

#include "runtime/checkpoint/files.hpp" // checkpoint_error

namespace rw::runtime::checkpoint {

class checkpoint_root {
public:
  /// `root` empty: no root (every path refused). Else it must be an existing
  /// directory; throws checkpoint_error saying why not.
  explicit checkpoint_root(const std::string& root = {});

  bool configured() const noexcept { return !root_.empty(); }
  /// The canonical root ("" without one).
  const std::string& path() const noexcept { return root_; }

  /// The canonical absolute form of `path`, under the root. `what` names the path in
  /// the refusal ("rw.checkpoint's directory", "restore", "checkpoint_dir"). Throws
  /// checkpoint_error saying why the path is refused and what to do.
  std::string resolve(const std::string& path, const std::string& what) const;

private:
  std::string root_;
};

} // namespace rw::runtime::checkpoint
