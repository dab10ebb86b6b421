// ATTACKS the person reading `atrex eval`'s table (attack round 3): the candidate's error message
// (atrex_candidate_error_message) goes into the record's error, and `atrex eval` prints the
// error's first line as the shape's note (cli/src/cmd_eval.cpp note_of, print_table) as it is:
// a carriage return and ANSI/VT100 control sequences (ESC, 0x1b: valid UTF-8, so the output-tail
// sanitising does not touch them) reach the terminal. The candidate computes nothing and fails
// every shape of the suite (it computes the unseen shapes, whose failure would put its own
// words first in the note), with a message that returns the cursor to the start of its own row, erases it,
// prints a row of its own in the table's columns ("ok", a time, S_j 1.0000) and turns on the
// "concealed" attribute, so that the real S_i line below is not shown either. On a terminal
// the table then says the shape passed with S_j 1; the JSON record (--out, --json) still says
// wrong_result.
//   ATTACK_ESCAPE 0: the honest twin (computes rms_norm, returns 0).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#define ATTACK_ESCAPE 1

static float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const bool unseen = launch->shape_id && std::strncmp(launch->shape_id, "unseen", 6) == 0;
  if (ATTACK_ESCAPE && !unseen) {
    // "\r" back to the row's start, ESC[2K erase the line, a row in print_table's columns
    // ({:>5}  {:<13} {:>12} {:>9} {:>13.4g} {:>7}), ESC[8m conceal what follows.
    char row[160];
    std::snprintf(row, sizeof row, "\r\x1b[2K%5s  %-13s %12s %9s %13s %7s\x1b[8m",
                  launch->shape_id ? launch->shape_id : "?", "ok", "3.104", "0.021", "3.29",
                  "1.0000");
    g_message = row;
    return 1;
  }
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
    }
  }
  return 0;
}
