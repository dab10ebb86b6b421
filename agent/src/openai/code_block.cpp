#include "openai/code_block.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <fmt/format.h>

namespace atrex::agent::openai {

namespace {

// The fence's backtick count when `line` opens or closes a fence, else 0.
size_t fence_length(std::string_view line) {
  size_t indent = 0;
  while (indent < line.size() && indent < 4 && line[indent] == ' ') ++indent;
  if (indent > 3) return 0;
  size_t n = 0;
  while (indent + n < line.size() && line[indent + n] == '`') ++n;
  return n >= 3 ? n : 0;
}

std::string info_word(std::string_view line) {
  const size_t start = line.find_first_not_of(" `");
  if (start == std::string_view::npos) return "";
  std::string word;
  for (size_t i = start;
       i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])) && line[i] != '{';
       ++i) {
    word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(line[i]))));
  }
  return word;
}

std::vector<std::string> tags_for(Backend backend) {
  switch (backend) {
    case Backend::kCuda: return {"cuda", "cu", "c++", "cpp", "cxx", "c"};
    case Backend::kHip: return {"hip", "c++", "cpp", "cxx", "c"};
    case Backend::kCpu: return {"c++", "cpp", "cxx", "cc", "c"};
  }
  return {};
}

const char* fence_tag(Backend backend) {
  return backend == Backend::kCuda ? "cuda" : backend == Backend::kHip ? "hip" : "cpp";
}

}  // namespace

std::vector<CodeBlock> fenced_blocks(std::string_view text) {
  std::vector<CodeBlock> out;
  std::istringstream in{std::string(text)};
  size_t open_len = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t n = fence_length(line);
    if (open_len == 0) {
      if (n == 0) continue;
      open_len = n;
      out.push_back(CodeBlock{info_word(line), "", false});
    } else if (n >= open_len && line.find_first_not_of(" `") == std::string::npos) {
      out.back().closed = true;
      open_len = 0;
    } else {
      out.back().code += line;
      out.back().code += '\n';
    }
  }
  return out;
}

Extraction extract_candidate(std::string_view reply, Backend backend, bool python) {
  const std::vector<CodeBlock> blocks = fenced_blocks(reply);
  const std::vector<std::string> tags =
      python ? std::vector<std::string>{"python", "py", "python3"} : tags_for(backend);
  auto pick = [&](auto&& accept) -> const CodeBlock* {
    const CodeBlock* best = nullptr;
    for (const auto& b : blocks) {
      if (!b.closed || !accept(b) || b.code.find_first_not_of(" \t\n") == std::string::npos)
        continue;
      if (!best || b.code.size() >= best->code.size()) best = &b;
    }
    return best;
  };
  const CodeBlock* chosen = pick([&](const CodeBlock& b) {
    return std::find(tags.begin(), tags.end(), b.lang) != tags.end();
  });
  if (!chosen) chosen = pick([](const CodeBlock& b) { return b.lang.empty(); });
  if (chosen) return Extraction{chosen->code, ""};
  Extraction e;
  if (!blocks.empty() && !blocks.back().closed) {
    e.failure = fmt::format(
        "Your reply was cut off inside a code block (it never closed), so there is no complete "
        "candidate. Reply with the complete source file in one ```{} block and keep the prose "
        "short.",
        python ? "python" : fence_tag(backend));
  } else if (!blocks.empty()) {
    std::string langs;
    for (const auto& b : blocks)
      langs += (langs.empty() ? "" : ", ") + (b.lang.empty() ? "untagged" : b.lang);
    e.failure = fmt::format(
        "Your reply had code blocks ({}) but none in the backend's language. Reply with the "
        "complete source file in one ```{} block.",
        langs, python ? "python" : fence_tag(backend));
  } else {
    e.failure = fmt::format(
        "Your reply contained no fenced code block. Reply with the complete source file in one "
        "```{} block.",
        python ? "python" : fence_tag(backend));
  }
  return e;
}

}  // namespace atrex::agent::openai
