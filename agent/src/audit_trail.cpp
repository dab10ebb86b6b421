#include "atrex/agent/audit_trail.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "atrex/common/clock.h"
#include "atrex/common/hash.h"
#include "atrex/common/wire/reader.h"

namespace atrex::agent {
namespace fs = std::filesystem;

namespace {

// flock(2) held for a scope. flock is per open file description, so two AuditTrail objects of
// one process on one file exclude each other as two processes do.
class FileLock {
 public:
  FileLock(int fd, int how) : fd_(fd) {
    while (::flock(fd_, how) != 0 && errno == EINTR) {}
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

Result<int> int_member(const JsonField& f, const char* key, int fallback) {
  if (!f.has(key)) return fallback;
  ATREX_ASSIGN_OR_RETURN(auto c, f.at(key));
  int v = 0;
  ATREX_TRY(read_value(c, v));
  return v;
}

}  // namespace

AuditTrail::~AuditTrail() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<AuditTrail>> AuditTrail::open(const fs::path& file) {
  auto trail = std::make_unique<AuditTrail>();
  trail->file_ = file;
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  trail->fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (trail->fd_ < 0) {
    return io_error(
        fmt::format("{}: cannot open audit trail: {}", file.string(), std::strerror(errno)));
  }
  ATREX_TRY(trail->refresh());
  return trail;
}

Result<void> AuditTrail::refresh() {
  std::lock_guard lock(mu_);
  FileLock shared(fd_, LOCK_SH);  // no line is half-written while we read
  return read_new_locked();
}

Result<void> AuditTrail::read_new_locked() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return io_error(fmt::format("{}: stat failed", file_.string()));
  if (st.st_size <= read_offset_) return ok();
  std::string data(static_cast<size_t>(st.st_size - read_offset_), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd_, data.data() + got, data.size() - got,
                              static_cast<off_t>(read_offset_ + static_cast<long long>(got)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  size_t pos = 0;
  for (;;) {
    const size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) break;  // a torn or still-written last line: not yet
    const std::string line = data.substr(pos, nl - pos);
    ++lines_read_;
    const std::string where = fmt::format("{}: line {}", file_.string(), lines_read_);
    Json event;
    try {
      event = Json::parse(line);
    } catch (const Json::exception& e) {
      return invalid_input(fmt::format("{}: not JSON: {}", where, e.what()));
    }
    ATREX_TRY(observe_locked(event, where));
    read_offset_ += static_cast<long long>(nl + 1 - pos);
    pos = nl + 1;
  }
  return ok();
}

// The events' members that progress() depends on are read strictly; the rest of an event is
// for people (and the reports). Members added for sub-agents and directions are optional, so
// trails written before them still read (sub-agent 0, no direction).
Result<void> AuditTrail::observe_locked(const Json& e, const std::string& where) {
  const JsonField f(e, where);
  ATREX_ASSIGN_OR_RETURN(auto kind_field, f.at("event"));
  ATREX_ASSIGN_OR_RETURN(std::string kind, kind_field.as_string());
  ATREX_ASSIGN_OR_RETURN(const int sub, int_member(f, "subagent", 0));
  Subagent& s = progress_.subagents[sub];
  if (kind == "evaluated" || kind == "proposal_failed") {
    if (f.has("usage")) {
      ATREX_ASSIGN_OR_RETURN(auto u, f.at("usage"));
      TokenUsage usage;
      ATREX_TRY(read_value(u, usage));
      progress_.usage.add(usage);
    }
    ATREX_ASSIGN_OR_RETURN(const int g, int_member(f, "generation", 0));
    ATREX_ASSIGN_OR_RETURN(const int it, int_member(f, "iteration", 0));
    progress_.open_claims.erase({sub, g, it});
    ++progress_.iterations_used;
    if (s.generation == g) ++s.iterations_in_generation;
  }
  if (kind == "proposal_failed") {
    // counted above
  } else if (kind == "evaluated") {
    std::string sha256;
    double score = -1;
    ATREX_ASSIGN_OR_RETURN(auto sha_field, f.at("sha256"));
    ATREX_TRY(read_value(sha_field, sha256));
    ATREX_ASSIGN_OR_RETURN(auto score_field, f.at("score"));
    ATREX_TRY(read_value(score_field, score));
    tried_.insert(sha256);
    if (score >= 0 && score > progress_.best.score) {
      BestCandidate b;
      b.sha256 = sha256;
      b.score = score;
      ATREX_ASSIGN_OR_RETURN(auto src, f.at("source"));
      ATREX_TRY(read_value(src, b.source));
      ATREX_ASSIGN_OR_RETURN(auto name, f.at("file_name"));
      ATREX_TRY(read_value(name, b.file_name));
      ATREX_ASSIGN_OR_RETURN(auto prov, f.at("provenance"));
      b.provenance = prov.value();
      progress_.best = std::move(b);
    }
  } else if (kind == "iteration_claimed") {
    ATREX_ASSIGN_OR_RETURN(auto g_field, f.at("generation"));
    ATREX_ASSIGN_OR_RETURN(auto it_field, f.at("iteration"));
    int g = 0, it = 0;
    ATREX_TRY(read_value(g_field, g));
    ATREX_TRY(read_value(it_field, it));
    progress_.open_claims.insert({sub, g, it});
  } else if (kind == "generation_start" || kind == "generation_end") {
    ATREX_ASSIGN_OR_RETURN(auto g, f.at("generation"));
    int generation = 0;
    ATREX_TRY(read_value(g, generation));
    if (kind == "generation_start") {
      const bool resumed = s.started && s.generation == generation;
      s.generation = generation;
      s.started = true;
      s.ended = false;
      if (!resumed) {
        s.iterations_in_generation = 0;
        if (f.has("direction")) {
          ATREX_ASSIGN_OR_RETURN(auto d, f.at("direction"));
          ATREX_ASSIGN_OR_RETURN(auto id, d.at("id"));
          ATREX_ASSIGN_OR_RETURN(std::string direction, id.as_string());
          ++progress_.directions[direction];
          s.direction = direction;
        }
      }
      if (f.has("t_unix_s")) {
        ATREX_ASSIGN_OR_RETURN(auto t, f.at("t_unix_s"));
        ATREX_ASSIGN_OR_RETURN(double at, t.as_number());
        if (!progress_.started_at_unix_s || at < *progress_.started_at_unix_s)
          progress_.started_at_unix_s = at;
      }
    } else {
      ATREX_ASSIGN_OR_RETURN(auto reason, f.at("reason"));
      ATREX_ASSIGN_OR_RETURN(std::string r, reason.as_string());
      // Claims of an ended generation that no iteration finished (a provider out of ideas)
      // go back to the budget.
      for (auto c = progress_.open_claims.begin(); c != progress_.open_claims.end();) {
        if (std::get<0>(*c) == sub && std::get<1>(*c) == generation)
          c = progress_.open_claims.erase(c);
        else
          ++c;
      }
      if (r == "dropout") {
        s.generation = generation + 1;
        s.started = false;
        s.iterations_in_generation = 0;
      } else {
        s.ended = true;
        s.end_reason = r;
      }
    }
  } else if (kind == "final") {
    progress_.final_written = true;
  } else {
    return kind_field.fail(
        "expected generation_start, iteration_claimed, evaluated, proposal_failed, "
        "generation_end or final");
  }
  progress_.iterations_claimed_open = static_cast<int>(progress_.open_claims.size());
  progress_.generation = progress_.subagents[0].generation;
  return ok();
}

AuditTrail::Progress AuditTrail::progress() const {
  std::lock_guard lock(mu_);
  return progress_;
}

Result<void> AuditTrail::write_locked(Json event) {
  // Catch up first: `event` is observed after everything before it in the file.
  ATREX_TRY(read_new_locked());
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return io_error(fmt::format("{}: stat failed", file_.string()));
  if (st.st_size > read_offset_) {
    // Bytes after the last whole line: a writer was killed mid-line. Cut them off, or this
    // line would be glued to them.
    if (::ftruncate(fd_, static_cast<off_t>(read_offset_)) != 0) {
      return io_error(
          fmt::format("{}: cannot cut a torn last line: {}", file_.string(), std::strerror(errno)));
    }
  }
  event["ts"] = utc_timestamp_now();
  ATREX_TRY(observe_locked(event, file_.string() + " (event being written)"));
  const std::string line = event.dump() + '\n';
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return io_error(fmt::format("{}: write failed: {}", file_.string(), std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  read_offset_ += static_cast<long long>(line.size());
  ++lines_read_;
  return ok();
}

Result<void> AuditTrail::append(Json event) {
  std::lock_guard lock(mu_);
  FileLock exclusive(fd_, LOCK_EX);
  return write_locked(std::move(event));
}

Result<void> AuditTrail::transact(
    const std::function<Result<std::vector<Json>>(const Progress&)>& decide) {
  std::lock_guard lock(mu_);
  FileLock exclusive(fd_, LOCK_EX);
  ATREX_TRY(read_new_locked());
  ATREX_ASSIGN_OR_RETURN(std::vector<Json> events, decide(progress_));
  for (auto& e : events) ATREX_TRY(write_locked(std::move(e)));
  return ok();
}

std::set<std::string> AuditTrail::tried() const {
  std::lock_guard lock(mu_);
  return tried_;
}

Result<std::optional<EvaluatedCandidate>> read_evaluated_candidate(const fs::path& file,
                                                                   const std::string& sha256) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot be read: {}", file.string(), std::strerror(errno)));
  std::string line;
  while (std::getline(in, line)) {
    // Most lines are other events or other candidates: skip them without parsing.
    if (line.find(sha256) == std::string::npos) continue;
    Json e = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_object() || e.value("event", "") != "evaluated" || e.value("sha256", "") != sha256)
      continue;
    const auto src = e.find("source");
    const auto name = e.find("file_name");
    if (src == e.end() || !src->is_string() || name == e.end() || !name->is_string()) continue;
    if (sha256_hex(src->get<std::string>()) != sha256) continue;  // a trail that lies
    return EvaluatedCandidate{src->get<std::string>(), name->get<std::string>()};
  }
  return std::optional<EvaluatedCandidate>{};
}

}  // namespace atrex::agent
