// The evaluation child's side of the judge (judge.h; docs/evaluation.md "The judge"). The child
// no longer holds any reference output: after each checked call it publishes the candidate's
// outputs (host bytes in the shape's order, after the inputs in the same order on a shape's
// first check, the first after its timed calls and the re-checks of timed calls: `inputs`
// true; at other checks the judge may ask for them after the outputs) into a memfd it
// shares with the judge and asks the judge, on a pipe, to compare them with the input set it
// names (seed, range probe or not); the judge answers pass, or the failure's message. Around
// every timed call (or graph replay batch) it lets the judge's clock bracket the call.
//
// The messages (JSON lines both ways) are typed, each with its place in the protocol, in
// common/wire/judge_messages.h: prepare, check (and the inputs the judge may ask for after it),
// timing_begin, the bracket of every timed call (call_begin, the judge's go with its splice,
// call_end, the judge's answer saying whether it re-checks that call), timing_end, shape_end.
//
// The candidate runs in this process and can write anything on these fds; the judge reads them as
// untrusted (judge.cpp). Nothing here is a secret: the judge's verdict goes to the runner on a
// pipe this process never holds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_record.h"
#include "child_device.h"
#include "protocol/shared_layout.h"
#include "shape_run_support.h"

namespace atrex::runner::child {

class JudgeLink {
 public:
  // `to_judge`, `from_judge`: the pipe ends; `shared_fd`: the memfd both map (-1: no judge, every
  // call fails: a task needs one).
  JudgeLink(int to_judge, int from_judge, int shared_fd)
      : out_(to_judge), in_(from_judge), shared_(shared_fd) {}
  ~JudgeLink();
  JudgeLink(const JudgeLink&) = delete;
  JudgeLink& operator=(const JudgeLink&) = delete;

  // Writes `buffers` (device pointers of `dev`, with byte sizes) one after the other from
  // byte `from` of the shared memfd; nothing with a device arena (the buffers are there).
  Status publish(ChildDevice& dev, const std::vector<std::pair<const void*, size_t>>& buffers,
                 size_t from = 0);
  // The shared memfd's mapping, where `layout.output` places the outputs of a backend whose
  // brackets hold the work (cpu): the judge reads them there at every timed call's done.
  // kIo when there is no judge or the memfd is smaller than layout.total.
  Result<uint8_t*> output_arena(ChildDevice& dev, const SharedLayout& layout);
  // The judge's device arena (protocol/arena_handoff.h), mapped by child_main before any
  // candidate code runs: where the child keeps the candidate's work inputs and guarded outputs
  // (shared_layout.h device_arena_layout). While one is set, publish() copies nothing: the judge
  // reads the arena itself. nullptr: none (the memfd copies).
  void set_device_arena(void* base, uint64_t bytes) {
    arena_ = static_cast<uint8_t*>(base);
    arena_bytes_ = bytes;
  }
  uint8_t* device_arena() const { return arena_; }
  uint64_t device_arena_bytes() const { return arena_bytes_; }
  // Tells the judge which input set comes next, so that it draws it and runs the reference
  // while this process draws the same inputs and calls the candidate (no answer awaited).
  Status prepare(const std::string& shape_id, const SetKey& key);
  // The judge's comparison of what was published with input set `key`: "" when it passed, else
  // the failure's message (context included). `inputs`: the inputs were published ahead of
  // the outputs (the judge says when they must be: a mismatch is tampering). Without them the
  // judge may answer {"inputs":true} instead: then `publish_inputs` publishes them after the
  // outputs, {"op":"inputs"} tells the judge, and its answer follows. kIo when the judge
  // cannot be reached.
  Result<std::string> check(const std::string& shape_id, const SetKey& key,
                            const std::string& context, bool inputs,
                            const std::function<Status()>& publish_inputs);
  Status timing_begin(const std::string& shape_id);
  // Bracket one timed call (calls = 1) or a replay batch (calls = its samples). call_begin
  // returns the splice the judge's go names (-1 after an error); call_end waits for the judge's
  // answer (on cpu the judge reads the outputs in the arena before it answers). Errors stick
  // (failed()) because the hooks of ChildDevice::time_call return nothing.
  int64_t call_begin();
  void call_end(int calls);
  Status timing_end();
  Status shape_end(const std::string& shape_id, EvalStatus claimed);
  // The first error of call_begin/call_end ("" while none).
  const std::string& failed() const { return sticky_; }
  // Whether the judge asked, in its answer to the last call_end, to re-check that call (reset
  // by this call).
  bool take_recheck() { return std::exchange(recheck_, false); }

 private:
  Status map(ChildDevice& dev);
  Status send(const Json& message);
  Result<Json> receive();
  Status expect_go();
  void spin_for_reply();

  int out_, in_, shared_;
  std::string pending_;  // bytes read after the last reply's newline
  uint8_t* map_ = nullptr;  // the shared memfd, mapped on first use
  size_t map_bytes_ = 0;
  ChildDevice* pinned_by_ = nullptr;  // the device that page-locked map_ (unpinned at the end)
  std::string sticky_;
  bool recheck_ = false;
  uint8_t* arena_ = nullptr;  // the judge's device arena (device memory), or none
  uint64_t arena_bytes_ = 0;
};

}  // namespace atrex::runner::child
