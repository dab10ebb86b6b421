// Text that came from untrusted code (a candidate's output, its error messages, a compiler's
// diagnostics of its source) made safe to store and show.
#pragma once

#include <string>

namespace atrex {

// `s` with every byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no overlong
// forms, no surrogates, at most U+10FFFF) replaced by '?': records and messages are serialised as
// JSON, which must be UTF-8 (attack round of 2026-12-01: raw bytes on a child's stdout made the
// runner throw while writing the record).
std::string valid_utf8(std::string s);

// valid_utf8, then every control character but '\n' and '\t' replaced by '?': C0 (ESC, '\r',
// BEL, ...), DEL and C1 (U+0080..U+009F, where CSI also lives). A candidate's error message is
// printed by `atrex eval` and the reports (attack round 3, 2026-12-06: "\r", ESC[2K and a row of
// its own overwrote its `wrong_result` row on the terminal, ESC[8m concealed the S_i line).
std::string printable_text(std::string s);

}  // namespace atrex
