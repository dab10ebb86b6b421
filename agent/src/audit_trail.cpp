#include "atrex/agent/audit_trail.h"

#include <fmt/format.h>

#include "atrex/common/clock.h"
#include "atrex/common/wire/reader.h"

namespace atrex::agent {
namespace fs = std::filesystem;

Result<std::unique_ptr<AuditTrail>> AuditTrail::open(const fs::path& file) {
  auto trail = std::make_unique<AuditTrail>();
  trail->file_ = file;
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (fs::exists(file, ec)) {
    std::ifstream in(file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
    for (size_t i = 0; i < lines.size(); ++i) {
      Json event;
      try {
        event = Json::parse(lines[i]);
      } catch (const Json::exception& e) {
        if (i + 1 == lines.size()) break;  // a torn last line of a killed run: redone
        return invalid_input(
            fmt::format("{}: line {}: not JSON: {}", file.string(), i + 1, e.what()));
      }
      ATREX_TRY(trail->observe_locked(event, fmt::format("{}: line {}", file.string(), i + 1)));
    }
  }
  trail->out_.open(file, std::ios::app);
  if (!trail->out_) return io_error(fmt::format("{}: cannot open audit trail", file.string()));
  return trail;
}

// The events' members that progress() depends on are read strictly; the rest of an event is
// for people (and the reports).
Result<void> AuditTrail::observe_locked(const Json& e, const std::string& where) {
  const JsonField f(e, where);
  ATREX_ASSIGN_OR_RETURN(auto kind_field, f.at("event"));
  ATREX_ASSIGN_OR_RETURN(std::string kind, kind_field.as_string());
  if (kind == "evaluated" || kind == "proposal_failed") {
    if (f.has("usage")) {
      ATREX_ASSIGN_OR_RETURN(auto u, f.at("usage"));
      TokenUsage usage;
      ATREX_TRY(read_value(u, usage));
      progress_.usage.add(usage);
    }
  }
  if (kind == "proposal_failed") {
    ++progress_.iterations_used;
  } else if (kind == "evaluated") {
    std::string sha256;
    double score = -1;
    ATREX_ASSIGN_OR_RETURN(auto sha_field, f.at("sha256"));
    ATREX_TRY(read_value(sha_field, sha256));
    ATREX_ASSIGN_OR_RETURN(auto score_field, f.at("score"));
    ATREX_TRY(read_value(score_field, score));
    tried_.insert(sha256);
    ++progress_.iterations_used;
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
  } else if (kind == "generation_start" || kind == "generation_end") {
    ATREX_ASSIGN_OR_RETURN(auto g, f.at("generation"));
    int generation = 0;
    ATREX_TRY(read_value(g, generation));
    if (kind == "generation_start") {
      progress_.generation = generation;
    } else {
      ATREX_ASSIGN_OR_RETURN(auto reason, f.at("reason"));
      ATREX_ASSIGN_OR_RETURN(std::string r, reason.as_string());
      if (r == "dropout") progress_.generation = generation + 1;
    }
  } else if (kind != "final") {
    return kind_field.fail(
        "expected generation_start, evaluated, proposal_failed, generation_end or final");
  }
  return ok();
}

AuditTrail::Progress AuditTrail::progress() const {
  std::lock_guard lock(mu_);
  return progress_;
}

Result<void> AuditTrail::append(Json event) {
  std::lock_guard lock(mu_);
  event["ts"] = utc_timestamp_now();
  ATREX_TRY(observe_locked(event, file_.string() + " (event being written)"));
  out_ << event.dump() << '\n';
  out_.flush();
  if (!out_) return io_error(fmt::format("{}: write failed", file_.string()));
  return ok();
}

std::set<std::string> AuditTrail::tried() const {
  std::lock_guard lock(mu_);
  return tried_;
}

}  // namespace atrex::agent
