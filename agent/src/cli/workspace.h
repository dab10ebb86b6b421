// The staged workspace of one cli generation (docs/agents.md "What the CLI sees"): a private
// host folder (mode 0700) <root>/atrex-cli-XXXXXX holding `workspace/` (bound read-write at
// /workspace) and `run/` (the evaluation socket, bound read-only at /run/atrex; under /tmp when
// the root's path is too long for a socket address). Files the
// worker rewrites between runs are replaced, never written through: the CLI may have left a
// link or a folder in their place. The candidate is read the same way (no link followed, a
// regular file of at most 1 MiB), so a link to a host file never becomes a candidate.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "atrex/common/error.h"

namespace atrex::agent::cli {

class Workspace {
 public:
  // A fresh folder under `root` (empty: $ATREX_AGENT_WORKSPACES, else the temp folder).
  static Result<Workspace> create(const std::filesystem::path& root);
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) = delete;
  ~Workspace();  // removes the whole folder

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path dir() const { return root_ / "workspace"; }
  // The evaluation socket's folder: root()/run, or /tmp/atrex-run-XXXXXX when that path would
  // be too long for a socket address.
  const std::filesystem::path& run_dir() const { return run_dir_; }

  // Writes `rel` (a path under the workspace; its folders made) anew: an existing entry there
  // (a file, a link) is removed first, the file created exclusively without following links.
  Result<void> put(const std::string& rel, const std::string& text) const;
  // The regular file `name` at the workspace's top level; nullopt when absent; an error text
  // when it is a link, not a regular file, or over 1 MiB.
  Result<std::optional<std::string>> take(const std::string& name) const;

 private:
  explicit Workspace(std::filesystem::path root) : root_(std::move(root)) {}
  std::filesystem::path root_;
  std::filesystem::path run_dir_;
};

}  // namespace atrex::agent::cli
