// The knowledge base (DESIGN.md §7, issue 13 item 3): short optimisation notes (agent/kb/*.md,
// embedded in the binary), each tagged with the operator families and backends it is about and
// the bottleneck it addresses. The `openai` provider's prompt builder picks excerpts by the
// operator's family and, when it is known from measurements, by the bottleneck.
//
// A note is Markdown after a header of `key: value` lines ended by a line `---`:
//   title: Memory-bound kernels: coalescing and 16-byte vector loads
//   families: elementwise, norm        ("*" = every family)
//   bottleneck: memory                 (memory | compute | latency)
//   backends: cuda, hip                (cpu | cuda | hip)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/backend.h"

namespace atrex::agent {

enum class Bottleneck { kMemory, kCompute, kLatency };
const char* bottleneck_name(Bottleneck b);

// The family of each of the suite's 30 operators: "norm", "elementwise", "quant", "attention",
// "gemm", "routing" or "recurrent"; "" for an operator it does not know. Pure.
std::string_view operator_family(std::string_view op);
// What usually bounds the family's kernels (norm: memory, gemm: compute, routing: latency ...);
// kMemory for an unknown family.
Bottleneck family_bottleneck(std::string_view family);

struct KbNote {
  std::string path;  // file name under agent/kb/
  std::string title;
  std::vector<std::string> families;
  Bottleneck bottleneck = Bottleneck::kMemory;
  std::vector<Backend> backends;
  std::string body;  // the Markdown after the header
  bool covers(std::string_view family) const;
  bool targets(Backend backend) const;
};

class KnowledgeBase {
 public:
  // The notes compiled into the binary (agent/kb/*.md). Errors: a note that does not parse.
  static Result<KnowledgeBase> embedded();
  // One note; errors (kInvalidInput) name the path and the bad header line.
  static Result<KbNote> parse(const std::string& path, const std::string& text);
  static KnowledgeBase of(std::vector<KbNote> notes);

  // Notes for `family` on `backend`, at most `max_notes`: first those that address the
  // bottleneck (the measured one when given, else the family's usual one), then the family's
  // other notes, then notes for every family ("*") on that bottleneck, then the other general
  // notes; within each group in file-name order. Deterministic.
  std::vector<const KbNote*> select(std::string_view family, Backend backend,
                                    std::optional<Bottleneck> measured, size_t max_notes) const;
  const std::vector<KbNote>& notes() const { return notes_; }

 private:
  std::vector<KbNote> notes_;
};

}  // namespace atrex::agent
