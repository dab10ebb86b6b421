#include "atrex/agent/direction.h"

#include <algorithm>

#include <fmt/format.h>

#include "atrex/agent/knowledge_base.h"
#include "atrex/common/error.h"

namespace atrex::agent {
namespace {

std::string stem(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(0, dot);
}

// A bullet's first clause, up to the first ':' or '.', or 90 characters.
std::string title_of(const std::string& text) {
  size_t end = text.find_first_of(":.");
  if (end == std::string::npos || end > 90) end = std::min<size_t>(text.size(), 90);
  return text.substr(0, end);
}

// Top-level bullets ("- " at column 0, continued by indented lines) of a note's body.
std::vector<std::string> bullets(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  bool in_bullet = false;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string::npos) nl = body.size();
    const std::string line = body.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("- ", 0) == 0) {
      out.push_back(line.substr(2));
      in_bullet = true;
    } else if (in_bullet && !line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      const auto b = line.find_first_not_of(" \t");
      out.back() += " " + line.substr(b);
    } else {
      in_bullet = false;
    }
  }
  return out;
}

}  // namespace

std::vector<Direction> kb_directions(std::string_view op, Backend backend) {
  static const Result<KnowledgeBase> kb = KnowledgeBase::embedded();
  std::vector<Direction> out;
  if (!kb) return out;
  for (const KbNote* note : kb->select(operator_family(op), backend, std::nullopt, 1000)) {
    const auto items = bullets(note->body);
    for (size_t i = 0; i < items.size(); ++i) {
      out.push_back(Direction{fmt::format("kb:{}#{}", stem(note->path), i + 1),
                              fmt::format("{}: {}", note->title, title_of(items[i])), items[i]});
    }
  }
  return out;
}

const Direction& choose_direction(const std::vector<Direction>& candidates,
                                  const std::map<std::string, int>& tried, bool* repeated) {
  ATREX_ASSERT(!candidates.empty(), "choose_direction needs candidates");
  const Direction* least = nullptr;
  int least_count = 0;
  for (const auto& d : candidates) {
    auto it = tried.find(d.id);
    const int n = it == tried.end() ? 0 : it->second;
    if (n == 0) {
      if (repeated) *repeated = false;
      return d;
    }
    if (!least || n < least_count) {
      least = &d;
      least_count = n;
    }
  }
  if (repeated) *repeated = true;
  return *least;
}

}  // namespace atrex::agent
