// Optimisation directions (DESIGN.md §7, issue 13 item 4): what one generation of an AKA
// sub-agent sets out to try. Each generation takes one, chosen when it starts among those the
// (agent, operator)'s audit trail has not tried yet (the trail's generation_start events record
// it), so a dropout's fresh sub-agent, and each parallel sub-agent, works in a different
// direction. Model-backed providers take theirs from the knowledge base: one technique (one
// top-level bullet) of a note for the operator's family and backend, put into the first message
// of the generation. The search provider's directions are its kernel templates (the knowledge
// base's reference kernels): the direction picks the template the generation starts from.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/wire/backend.h"

namespace atrex::agent {

struct Direction {
  std::string id;     // stable: "kb:<note>#<n>" or "template:<op>/<backend>/<file>"
  std::string title;  // one line for people and prompts
  std::string text;   // what to do (the KB technique's text, the template's description)
};

// The techniques of the knowledge-base notes for `op`'s family on `backend`, in
// KnowledgeBase::select order (the family's usual bottleneck first), one per top-level bullet
// of each note. Empty when the embedded knowledge base has nothing for them.
std::vector<Direction> kb_directions(std::string_view op, Backend backend);

// The direction a new generation takes: the first of `candidates` that `tried` (direction id ->
// generations started in it) does not hold; when all were tried, the least tried (the first of
// those). `repeated` says which case it was. Requires a non-empty `candidates`. Pure.
const Direction& choose_direction(const std::vector<Direction>& candidates,
                                  const std::map<std::string, int>& tried, bool* repeated);

}  // namespace atrex::agent
