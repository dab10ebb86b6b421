// The candidate in a model's reply: a fenced code block (CommonMark: a line of three or more
// backticks, optionally indented up to three spaces, with an info string; closed by a line of at
// least as many backticks).
//
// The rule: among the *closed* blocks whose language tag is one of the backend's (cuda: cuda,
// cu, c++, cpp, cxx, c; hip: hip, c++, cpp, cxx, c; cpu: c++, cpp, cxx, cc, c), the longest; a
// tie goes to the last. Without any, the longest untagged closed block. Blocks in other
// languages (python, bash, text ...) are never taken. The longest wins over the last because
// models put a short snippet (a launch example, a diff excerpt) before or after the full file:
// the full file is the long one. An unclosed block (a reply cut at max_tokens) is not taken,
// and the failure says it was cut.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/wire/backend.h"

namespace atrex::agent::openai {

struct CodeBlock {
  std::string lang;  // the info string's first word, lower case; "" untagged
  std::string code;  // the lines between the fences
  bool closed = false;
};

// Every fenced block of `text` in order (the last one possibly unclosed). Pure.
std::vector<CodeBlock> fenced_blocks(std::string_view text);

struct Extraction {
  std::optional<std::string> source;  // the candidate, when the rule found one
  std::string failure;                // else why not, worded for the model
};

// Applies the rule above. Pure.
// `python`: the target is a Python module (target.h): blocks tagged python / py.
Extraction extract_candidate(std::string_view reply, Backend backend, bool python = false);

}  // namespace atrex::agent::openai
