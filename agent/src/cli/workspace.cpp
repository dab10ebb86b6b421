#include "cli/workspace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace atrex::agent::cli {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxCandidateBytes = 1 << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<Workspace> Workspace::create(const fs::path& root) {
  fs::path base = root;
  if (base.empty()) {
    const char* env = std::getenv("ATREX_AGENT_WORKSPACES");
    base = env && *env ? fs::path(env) : fs::temp_directory_path();
  }
  std::error_code ec;
  fs::create_directories(base, ec);
  std::string tmpl = (base / "atrex-cli-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    return io_error(fmt::format("making a cli workspace under {}: {}", base.string(),
                                std::strerror(errno)));
  }
  Workspace w{fs::path(tmpl)};
  if (::mkdir(w.dir().c_str(), 0700) != 0) {
    return io_error(fmt::format("making {}: {}", w.dir().string(), std::strerror(errno)));
  }
  // The socket's folder: next to the workspace unless that path is too long for a unix
  // socket address (108 bytes), then under /tmp.
  fs::path run = w.root_ / "run";
  if ((run / "eval.sock").string().size() >= 100) {
    std::string short_tmpl = "/tmp/atrex-run-XXXXXX";
    if (!::mkdtemp(short_tmpl.data())) {
      return io_error(fmt::format("making a socket folder under /tmp: {}", std::strerror(errno)));
    }
    w.run_dir_ = short_tmpl;
  } else {
    if (::mkdir(run.c_str(), 0700) != 0) {
      return io_error(fmt::format("making {}: {}", run.string(), std::strerror(errno)));
    }
    w.run_dir_ = run;
  }
  return w;
}

Workspace::Workspace(Workspace&& o) noexcept
    : root_(std::move(o.root_)), run_dir_(std::move(o.run_dir_)) {
  o.root_.clear();
  o.run_dir_.clear();
}

Workspace::~Workspace() {
  if (root_.empty()) return;
  std::error_code ec;
  // A folder the CLI made unreadable would stop the removal: give every folder back its rights.
  for (auto it = fs::recursive_directory_iterator(
           root_, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  }
  if (!run_dir_.empty() && run_dir_.parent_path() != root_) fs::remove_all(run_dir_, ec);
  fs::remove_all(root_, ec);
  if (ec) spdlog::warn("removing the cli workspace {}: {}", root_.string(), ec.message());
}

Result<void> Workspace::put(const std::string& rel, const std::string& text) const {
  const fs::path p = dir() / rel;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
    return io_error(fmt::format("replacing {} in the workspace: {}", rel, std::strerror(errno)));
  }
  Fd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return io_error(fmt::format("writing {} in the workspace: {}", rel, std::strerror(errno)));
  }
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(fmt::format("writing {}: {}", rel, std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
  return ok();
}

Result<std::optional<std::string>> Workspace::take(const std::string& name) const {
  const fs::path p = dir() / name;
  Fd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::optional<std::string>{};
    if (errno == ELOOP) return invalid_input(name + " is a symbolic link, not the candidate file");
    return invalid_input(fmt::format("{} cannot be read: {}", name, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return invalid_input(name + " is not a regular file");
  }
  if (static_cast<size_t>(st.st_size) > kMaxCandidateBytes) {
    return invalid_input(fmt::format("{} is {} bytes (at most {})", name, st.st_size,
                                     kMaxCandidateBytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  text.resize(off);
  return std::optional<std::string>{std::move(text)};
}

}  // namespace atrex::agent::cli
