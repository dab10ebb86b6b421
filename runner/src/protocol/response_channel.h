// The runner's side of an evaluation child's result channel (docs/evaluation.md "Result
// channel"): the child writes one atrex.child-response/1 line per shape to an inherited pipe;
// the runner takes a line only when it carries the child's nonce and is the verdict of the next
// shape it asked for. Anything else (a line without the nonce or that does not parse, a shape
// out of order or twice, more lines than shapes, a line left unfinished at the end, more bytes
// than any honest child writes) is tampering: the candidate (or a copy of it) wrote into the
// channel, and the whole task is `rejected`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

// 128 random bits from the OS (getrandom), as 32 hex digits.
std::string make_nonce();

class ResponseChannel {
 public:
  // `shape_ids`: the shapes the child was asked for, in order.
  ResponseChannel(std::string nonce, std::vector<std::string> shape_ids,
                  size_t max_bytes = 64u << 20);

  // Bytes read from the pipe. Returns the verdicts of the lines they completed that passed the
  // checks; none once tampered().
  std::vector<ChildShapeResponse> feed(std::string_view bytes);
  // The child and every copy of it are gone: an unfinished line is tampering.
  void finish();

  bool tampered() const { return !why_.empty(); }
  // What was wrong, for the record's error ("" while nothing is).
  const std::string& why() const { return why_; }
  size_t accepted() const { return accepted_; }

 private:
  void take(std::string_view line, std::vector<ChildShapeResponse>& out);

  std::string nonce_;
  std::vector<std::string> shape_ids_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  size_t accepted_ = 0;
  std::string partial_;
  std::string why_;
};

// The judge's pipe to the runner (judge.h), read the same way: one atrex.judge-verdict/1 line per
// shape the child finished, in the order asked for, carrying the judge's own nonce. The judge is
// atrex's code, but what it says is read as strictly as the child's lines: a judge that cannot
// be read cannot vouch for a shape, and every shape of the task is then `rejected`.
class JudgeChannel {
 public:
  JudgeChannel(std::string nonce, std::vector<std::string> shape_ids,
               size_t max_bytes = 64u << 20);
  std::vector<JudgeVerdict> feed(std::string_view bytes);
  void finish();
  bool broken() const { return !why_.empty(); }
  const std::string& why() const { return why_; }

 private:
  void take(std::string_view line, std::vector<JudgeVerdict>& out);

  std::string nonce_;
  std::vector<std::string> shape_ids_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  size_t accepted_ = 0;
  std::string partial_;
  std::string why_;
};

}  // namespace atrex::runner
