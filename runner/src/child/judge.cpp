// The judge (judge.h): checks of the candidate child's calls against references that live only
// here, and the child's timed calls on this process's clock.
#include "judge.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "atrex/common/process/seccomp.h"
#include "atrex/common/text.h"
#include "atrex/common/untrusted_json.h"
#include "child_runner.h"
#include "protocol/arena_handoff.h"
#include "protocol/judge_messages.h"
#include "protocol/shared_layout.h"
#include "shape_run_support.h"

namespace atrex::runner {
namespace {

using child::Buffers;
using Clock = std::chrono::steady_clock;

void close_fd(int fd) { ::close(fd); }
double wake_up_latency_us(int ping_fd, int pong_fd);
// The start probe (judge_prelude), 0 until taken.
double g_start_latency_us = 0;

// The judge's choices that the candidate sees or can count (which timed calls are re-checked,
// the go's splice, the first re-check's call) come from the kernel's CSPRNG (getrandom(2), 512
// bytes at a time). A std::mt19937_64 is linear over GF(2): from the 40 low bits of the splice
// each go hands the child, a fresh attacker (2026-12-06) solved its whole state after ~1000 goes
// in 0.5 s and knew every later splice and re-check in advance, however it was seeded
// (AttackRound3.TheJudgesDrawsCannotBePredicted).
class JudgeRandom {
 public:
  uint64_t operator()() {
    if (next_ == std::size(pool_)) refill();
    return pool_[next_++];
  }

 private:
  void refill() {
    auto* p = reinterpret_cast<uint8_t*>(pool_);
    size_t got = 0;
    while (got < sizeof pool_) {
      const ssize_t n = ::getrandom(p + got, sizeof pool_ - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::fprintf(stderr, "judge: getrandom: %s\n", std::strerror(errno));
        std::abort();  // a judge without unpredictable choices must not judge: the task crashes
      }
      got += static_cast<size_t>(n);
    }
    next_ = 0;
  }
  uint64_t pool_[64] = {};
  size_t next_ = std::size(pool_);
};

// Thrown inside the judge's loop: what the child's messages broke (tampering) or a device
// failure of the judge's own (crashed).
struct Stop {
  bool tampering;
  std::string why;
};

class Judge {
 public:
  // `arena`: the device arena offered to the child (offer_device_arena; none: nullptr), and
  // the socket its answer comes on (closed once read).
  Judge(const ChildTaskRequest& task, ChildDevice& dev, int verdict_fd, int in_fd, int out_fd,
        int shared_fd, int ping_fd, int pong_fd, ChildDevice::SharedMemory arena,
        int arena_socket)
      : task_(task), dev_(dev), verdict_fd_(verdict_fd), in_(in_fd), out_(out_fd),
        shared_(shared_fd), ping_(ping_fd), pong_(pong_fd),
        device_arena_(static_cast<uint8_t*>(arena.ptr)), device_arena_bytes_(arena.bytes),
        arena_socket_(arena_socket) {}
  ~Judge() {
    if (arena_map_) ::munmap(const_cast<uint8_t*>(arena_map_), arena_map_bytes_);
    if (arena_socket_ >= 0) ::close(arena_socket_);
  }
  Judge(const Judge&) = delete;
  Judge& operator=(const Judge&) = delete;

  int run();

 private:
  struct InputSet {
    child::SetKey key;
    bool filled = false;
    uint64_t last_use = 0;
    std::vector<void*> in, ref;
    std::vector<std::vector<uint8_t>> host_in, host_ref;  // device backends: mirrors
    bool host_valid = false;
  };

  std::optional<std::string> read_line();
  // The next message, parsed (not JSON: tampering); nullopt when the child is done or gone.
  std::optional<Json> read_message();
  void reply(const Json& j);
  // One message of the child's (judge_messages.h), read strictly: anything malformed, or out of
  // its place in the protocol, is tampering.
  void handle(const Json& message);
  // The shape in hand, which `shape_id` must name; `enter`: its buffers allocated (not for a
  // shape the child ends without checks: one that does not resolve, a candidate that does not
  // load).
  const ChildShape& current(const std::string& shape_id, bool enter = true);
  void begin_verdict();
  void enter_shape();
  void leave_shape();
  bool legit_set(const child::SetKey& key);
  InputSet& input_set(const child::SetKey& key);
  void host_mirrors(InputSet& set);
  // With the device arena: the candidate's buffers there copied into host_in_/host_out_, once a
  // check (what the host comparisons and messages read).
  void candidate_to_host();
  // A check of the published outputs against the reference of `key`; `inputs`: whether the
  // child published the candidate's inputs ahead of them (inputs_due_ says when it must).
  void check(const child::SetKey& key, const std::string& context, bool inputs);
  // The reply to a call_end: whether to re-check that call (this process's randomness).
  bool choose_recheck(int calls);
  // Where the brackets hold the work: a check of spliced inputs is one of the last bracket's
  // call (a re-check, or the last timed call's outputs after timing); its splice must be the one
  // the go named. Returns the failure's words when the published outputs are not the ones the
  // judge read in the arena at that call's done ("" when they are).
  std::string check_bracket(const child::SetKey& key, const std::string& context);
  void call_begin();
  // `now`: when the done arrived (the bracket's end).
  void call_end(const JudgeCallEnd& m, Clock::time_point now);
  // At a done, where the brackets hold the work: reads the outputs in the shared memfd's arena
  // (protocol/shared_layout.h) into done_read_, whole when they total at most kWholeReadBytes,
  // else kReadLines lines of kLineBytes at places drawn now from rng_ (each output's lines in
  // proportion to its size). The candidate's threads may still be running: what a thread
  // finishes after this read differs from it at the drawn places with a probability that grows
  // with the work left (unfinished 1% of the lines: 1 - 0.99^4096, all but certain), and which
  // places are drawn is known only in this process. The digest the child used to send with its
  // done was taken in the candidate's own process, sequentially: a spinning thread of the
  // candidate's stayed just ahead of it (attack round 5, docs/measurements).
  void read_done_outputs();
  static constexpr size_t kWholeReadBytes = size_t{1} << 20, kReadLines = 4096, kLineBytes = 64;
  // `inputs`: the candidate's inputs were published with the outputs and are compared too.
  std::string compare(InputSet& set, const std::string& context, bool inputs);
  void finish_shape(EvalStatus claimed);
  void write_verdict(const JudgeVerdict& v);
  void device(const Status& s, const char* where) {
    if (!s) throw Stop{false, fmt::format("judge: {}: {}", where, s.error().message)};
  }

  const ChildTaskRequest& task_;
  ChildDevice& dev_;
  int verdict_fd_, in_, out_, shared_, ping_, pong_;
  std::string pending_;
  bool verdict_broken_ = false;

  // The shape in hand (task_.shapes[index_]).
  size_t index_ = 0;
  bool entered_ = false;
  const problems::OperatorDef* def_ = nullptr;
  problems::ResolvedShape shape_;
  double atol_ = 0, rtol_ = 0;
  bool probe_required_ = false, edge_required_ = false;
  std::unique_ptr<Buffers> buffers_;
  InputSet sets_[2];
  uint64_t uses_ = 0;
  // What the judge compares: the device arena's slots (device_arena_layout), else its staging
  // copies of what the child published (device), else host_in_/host_out_ (host memory).
  std::vector<void*> cand_in_, cand_out_;
  // Buffers of the timing calibration's reset, standing in for the child's (cand_ without the
  // arena, the judge's own with it: never the child's live buffers).
  std::vector<void*> calib_in_, calib_out_;
  std::vector<std::vector<uint8_t>> host_in_, host_out_;  // what the child published
  std::vector<void*> pinned_;  // of host_in_ / host_out_, page-locked while a shape is entered
  JudgeVerdict verdict_;
  std::set<uint64_t> passed_seeds_;
  std::set<std::pair<uint64_t, int>> post_timing_sets_;  // (seed, kind)
  bool in_timing_ = false, bracket_open_ = false;
  // Re-checks of timed calls: the judge asks for one after the call whose cumulative count first
  // passes recheck_after_calls_ (uniform below min_iterations, so every timed shape gets one),
  // and then after any call with probability 1/kRecheckOdds, kMaxTimedRechecks in all. Where
  // the brackets hold the work only the checked brackets bound the claimed time, and the
  // shortest of one or two is at the mercy of one scheduling stall: there 1/4 for the first 8,
  // then 1/16 with no cap. A cap the candidate can count (it sees every reply: a hook on the
  // child's read) let calls after the 8th re-check skip their work, all but the last timed one
  // (whose outputs are checked after timing): shape 0 of rms_norm `ok` at 112 us against its
  // twin's 2334 us (the window-splice attack of 2026-12-06). Uncapped, k skipped calls survive
  // with probability (15/16)^k: 2e-5 for the 165 calls that attack skipped.
  static constexpr int kMaxTimedRechecks = 3, kFrequentTimedRechecksHoldingWork = 8;
  static constexpr uint64_t kRecheckOdds = 32, kRecheckOddsHoldingWork = 4,
                            kLaterRecheckOddsHoldingWork = 16;
  JudgeRandom rng_;
  int64_t timed_calls_ = 0, recheck_after_calls_ = 0;
  bool recheck_pending_ = false;
  Clock::time_point bracket_start_;
  // Per bracket of the shape: the splice its go named.
  struct Bracket {
    int64_t splice = -1;
  };
  std::vector<Bracket> brackets_;
  // What read_done_outputs read at the last bracket's done: per output, the byte offsets of the
  // lines read (every line when it read them whole) and their bytes, one after the other.
  struct DoneRead {
    std::vector<std::vector<uint64_t>> at;
    std::vector<std::vector<uint8_t>> bytes;
  };
  DoneRead done_read_;
  SharedLayout layout_;                 // the shape's (enter_shape)
  // The judge's device arena (protocol/arena_handoff.h): kept once the child answered that it
  // mapped it (read at the first shape entered), else dropped (nullptr) for the memfd copies.
  uint8_t* device_arena_ = nullptr;
  uint64_t device_arena_bytes_ = 0;
  int arena_socket_ = -1;
  bool candidate_on_host_ = false;  // candidate_to_host done for this check
  const uint8_t* arena_map_ = nullptr;  // the shared memfd, mapped read-only on first use
  size_t arena_map_bytes_ = 0;
  int64_t go_splice_ = -1;  // the open bracket's
  bool last_bracket_checked_ = false;
  // Whether the next check must carry the candidate's inputs (published ahead of its outputs):
  // a shape's first check, the first after its timed calls and every timed call this judge
  // chose to re-check (drawn after the call). Any other check carries the outputs alone, and
  // after it came the judge asks for the inputs as well with probability 1/kInputCheckOdds
  // (drawn then, after the call returned: a candidate cannot tell which of its calls will have
  // their inputs looked at). Publishing every input on every check cost a large shape several
  // host copies of its tensors per check (fp8_blockscale_fused_moe shape 1: 11 GB of weights,
  // ~15 checks, most of a 42.85 s check phase on the H100). Attack round 7 (2026-12-07) wrote
  // its inputs on every call but the first, or in every timed call but the predictable last:
  // with the first two rules alone both passed. A candidate that restores its inputs before
  // they are published is out of any such check's reach (it runs in the publishing process).
  bool inputs_due_ = true;
  static constexpr uint64_t kInputCheckOdds = 4;
};

std::optional<std::string> Judge::read_line() {
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    if (pending_.size() > (1u << 20)) throw Stop{true, "a message to the judge is over 1 MiB"};
    char buf[65536];
    const ssize_t n = ::read(in_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!pending_.empty()) throw Stop{true, "an unfinished message to the judge"};
      return std::nullopt;  // the child is done (or gone)
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<Json> Judge::read_message() {
  const auto line = read_line();
  if (!line) return std::nullopt;
  auto parsed = parse_untrusted_json(*line);
  if (!parsed) {
    const std::string& why = parsed.error().message;
    throw Stop{true, "a message to the judge is " + (why == "not JSON" ? why : "JSON " + why)};
  }
  return std::move(*parsed);
}

void Judge::reply(const Json& j) {
  // The child may be gone (its pipe closed): that ends the judge at the next read.
  (void)write_response_line(out_, j.dump() + "\n");
}

void Judge::write_verdict(const JudgeVerdict& v) {
  JudgeVerdict out = v;
  out.nonce = task_.nonce;
  if (!write_response_line(verdict_fd_, to_json(out).dump() + "\n")) verdict_broken_ = true;
}

const ChildShape& Judge::current(const std::string& shape_id, bool enter) {
  if (index_ >= task_.shapes.size())
    throw Stop{true, fmt::format("a message for shape {} after the task's last shape", shape_id)};
  const ChildShape& item = task_.shapes[index_];
  if (shape_id != item.shape_id)
    throw Stop{true, fmt::format("a message for shape {} where shape {} is in hand", shape_id,
                                 item.shape_id)};
  if (enter && !entered_) enter_shape();
  return item;
}

// Per-shape bookkeeping, for the shape at index_ (before its first message).
void Judge::begin_verdict() {
  verdict_ = JudgeVerdict{};
  verdict_.start_latency_us = g_start_latency_us;
  if (index_ < task_.shapes.size()) verdict_.shape_id = task_.shapes[index_].shape_id;
  passed_seeds_.clear();
  post_timing_sets_.clear();
  in_timing_ = bracket_open_ = recheck_pending_ = false;
  inputs_due_ = true;
  timed_calls_ = 0;
  brackets_.clear();
  last_bracket_checked_ = false;
  verdict_.brackets_hold_work = dev_.brackets_hold_work();
  verdict_.device_arena = device_arena_ != nullptr;
  const auto* def = problems::find_native_operator(task_.operator_name);
  probe_required_ = def && def->range_probe.enabled() && index_ < task_.shapes.size() &&
                    task_.shapes[index_].range_probe;
  edge_required_ = def && !def->edge_cases.empty() && index_ < task_.shapes.size() &&
                   task_.shapes[index_].edge_cases;
}

void Judge::enter_shape() {
  const ChildShape& item = task_.shapes[index_];
  def_ = problems::find_native_operator(task_.operator_name);
  if (!def_) throw Stop{true, "a check of an operator without a native definition"};
  problems::Shape shape;
  shape.id = item.shape_id;
  shape.params = item.params;
  auto resolved = problems::resolve_shape(*def_, shape);
  if (!resolved) throw Stop{true, "a check of a shape that does not resolve: " +
                                      resolved.error().message};
  shape_ = std::move(*resolved);
  layout_ = shared_layout(shape_);
  atol_ = def_->atol.value_or(task_.atol);
  rtol_ = def_->rtol.value_or(task_.rtol);
  buffers_ = std::make_unique<Buffers>(dev_);
  auto take = [&](size_t bytes, std::vector<void*>& into) {
    auto p = buffers_->alloc(bytes);
    if (!p) throw Stop{false, "judge: allocating: " + p.error().message};
    into.push_back(*p);
  };
  for (auto& set : sets_) {
    set = InputSet{};
    for (const auto& d : shape_.inputs) take(d.bytes(), set.in);
    for (const auto& d : shape_.outputs) take(d.bytes(), set.ref);
  }
  if (arena_socket_ >= 0) {
    // The child answered before its first message (child_main), before any candidate code ran.
    if (!receive_arena_answer(arena_socket_)) device_arena_ = nullptr;
    ::close(arena_socket_);
    arena_socket_ = -1;
    verdict_.device_arena = device_arena_ != nullptr;
  }
  host_in_.assign(shape_.inputs.size(), {});
  host_out_.assign(shape_.outputs.size(), {});
  cand_in_.clear();
  cand_out_.clear();
  calib_in_.clear();
  calib_out_.clear();
  if (device_arena_) {
    // The candidate's buffers are compared where the child keeps them; the host copies are
    // made only for a failure's message (candidate_to_host).
    const DeviceArenaLayout arena = device_arena_layout(shape_);
    if (arena.total > device_arena_bytes_)
      throw Stop{false, fmt::format("judge: shape {} needs {} bytes of the device arena, it holds {}",
                                    item.shape_id, arena.total, device_arena_bytes_)};
    for (uint64_t at : arena.input) cand_in_.push_back(device_arena_ + at);
    for (uint64_t at : arena.output) cand_out_.push_back(device_arena_ + at);
    if (item.performance) {
      for (const auto& d : shape_.inputs) take(d.bytes(), calib_in_);
      for (const auto& d : shape_.outputs) take(d.bytes(), calib_out_);
    }
    entered_ = true;
    return;
  }
  for (size_t i = 0; i < shape_.inputs.size(); ++i) host_in_[i].resize(shape_.inputs[i].bytes());
  for (size_t i = 0; i < shape_.outputs.size(); ++i)
    host_out_[i].resize(shape_.outputs[i].bytes());
  // Every check copies what the child published from these to the device.
  for (auto* list : {&host_in_, &host_out_})
    for (auto& b : *list)
      if (dev_.pin_host(b.data(), b.size())) pinned_.push_back(b.data());
  if (dev_.host_memory()) {
    for (auto& b : host_in_) cand_in_.push_back(b.data());
    for (auto& b : host_out_) cand_out_.push_back(b.data());
  } else {
    for (const auto& d : shape_.inputs) take(d.bytes(), cand_in_);
    for (const auto& d : shape_.outputs) take(d.bytes(), cand_out_);
  }
  calib_in_ = cand_in_;
  calib_out_ = cand_out_;
  entered_ = true;
}

void Judge::leave_shape() {
  for (void* p : pinned_) dev_.unpin_host(p);
  pinned_.clear();
  for (auto& set : sets_) set = InputSet{};
  cand_in_.clear();
  cand_out_.clear();
  calib_in_.clear();
  calib_out_.clear();
  host_in_.clear();
  host_out_.clear();
  buffers_.reset();
  if (entered_) dev_.trim();
  entered_ = false;
  ++index_;
  begin_verdict();
}

Judge::InputSet& Judge::input_set(const child::SetKey& key) {
  for (auto& set : sets_) {
    if (set.filled && set.key == key) {
      set.last_use = ++uses_;
      return set;
    }
  }
  InputSet& set = sets_[0].last_use <= sets_[1].last_use ? sets_[0] : sets_[1];
  set.filled = false;
  set.host_valid = false;
  for (size_t i = 0; i < shape_.inputs.size(); ++i)
    device(child::draw_input(dev_, shape_, i, key, set.in[i]), "generating inputs");
  if (key.variant >= 0)
    device(child::apply_splice(dev_, shape_, set.in, key.variant, dev_.brackets_hold_work()),
           "splicing");
  device(dev_.synchronize(), "generating inputs");
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    const std::string& from = def_->outputs[i].initial_from;
    bool copied = false;
    for (size_t k = 0; !from.empty() && k < shape_.inputs.size(); ++k) {
      if (shape_.inputs[k].name == from) {
        device(dev_.copy(set.ref[i], set.in[k], shape_.outputs[i].bytes()), "initialising");
        copied = true;
      }
    }
    if (!copied) device(dev_.fill(set.ref[i], 0xFF, shape_.outputs[i].bytes()), "initialising");
  }
  std::vector<const void*> in(set.in.begin(), set.in.end());
  device(dev_.reference(shape_, in, set.ref), "reference");
  device(dev_.synchronize(), "reference");
  set.key = key;
  set.filled = true;
  set.last_use = ++uses_;
  return set;
}

void Judge::host_mirrors(InputSet& set) {
  if (set.host_valid || dev_.host_memory()) return;
  set.host_in.resize(shape_.inputs.size());
  set.host_ref.resize(shape_.outputs.size());
  for (size_t i = 0; i < shape_.inputs.size(); ++i) {
    set.host_in[i].resize(shape_.inputs[i].bytes());
    device(dev_.to_host(set.host_in[i].data(), set.in[i], shape_.inputs[i].bytes()), "copy");
  }
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    set.host_ref[i].resize(shape_.outputs[i].bytes());
    device(dev_.to_host(set.host_ref[i].data(), set.ref[i], shape_.outputs[i].bytes()), "copy");
  }
  set.host_valid = true;
}

void Judge::candidate_to_host() {
  if (!device_arena_ || candidate_on_host_) return;
  for (size_t i = 0; i < shape_.inputs.size(); ++i) {
    host_in_[i].resize(shape_.inputs[i].bytes());
    device(dev_.to_host(host_in_[i].data(), cand_in_[i], host_in_[i].size()), "copy");
  }
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    host_out_[i].resize(shape_.outputs[i].bytes());
    device(dev_.to_host(host_out_[i].data(), cand_out_[i], host_out_[i].size()), "copy");
  }
  candidate_on_host_ = true;
}

// The comparison of the published buffers with `set`: "" when they pass, else the message (the
// same words the child used to give: docs/evaluation.md "Gate 2").
std::string Judge::compare(InputSet& set, const std::string& context, bool inputs) {
  auto host_ptrs = [&](bool of_inputs) {
    std::vector<const void*> p;
    if (dev_.host_memory()) {
      for (void* b : of_inputs ? set.in : set.ref) p.push_back(b);
    } else {
      for (auto& b : of_inputs ? set.host_in : set.host_ref) p.push_back(b.data());
    }
    return p;
  };
  for (size_t i = 0; inputs && i < shape_.inputs.size(); ++i) {
    bool on_device = false;
    int64_t first = -1;
    device(dev_.first_difference(cand_in_[i], set.in[i], shape_.inputs[i].bytes(), first,
                                 on_device),
           "comparing inputs");
    if (on_device && first < 0) continue;
    host_mirrors(set);
    candidate_to_host();
    const auto pristine = host_ptrs(true);
    const auto diff = child::first_byte_difference(
        shape_.inputs[i], host_in_[i].data(), static_cast<const uint8_t*>(pristine[i]));
    if (!diff.empty())
      return context + "the candidate modified its input " + diff + "; inputs are read-only";
  }
  std::vector<std::optional<problems::CompareResult>> passed(shape_.outputs.size());
  const std::vector<const void*> dev_out(cand_out_.begin(), cand_out_.end()),
      dev_ref(set.ref.begin(), set.ref.end());
  bool need_host = false;
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    problems::CompareResult c;
    bool on_device = false;
    device(def_->outputs[i].compare
               ? dev_.compare_custom(shape_, i, dev_out, dev_ref, atol_, rtol_, c, on_device)
               : dev_.compare(shape_.outputs[i], cand_out_[i], set.ref[i], atol_, rtol_, c,
                              on_device),
           "comparing outputs");
    if (on_device && c.pass)
      passed[i] = c;
    else
      need_host = true;
  }
  std::vector<const void*> cand, ref, in;
  if (need_host) {
    host_mirrors(set);
    candidate_to_host();
    for (auto& b : host_out_) cand.push_back(b.data());
    ref = host_ptrs(false);
    in = host_ptrs(true);
  }
  for (size_t i = 0; i < shape_.outputs.size(); ++i) {
    const auto custom = def_->outputs[i].compare;
    problems::CompareResult c =
        passed[i] ? *passed[i]
        : custom  ? custom(shape_, i, cand, ref, in, atol_, rtol_)
                  : problems::compare_output(shape_.outputs[i], cand[i], ref[i], atol_, rtol_);
    verdict_.max_abs_error = std::max(verdict_.max_abs_error, c.max_abs_error);
    verdict_.max_rel_error = std::max(verdict_.max_rel_error, c.max_rel_error);
    if (c.low_signal) {
      auto& ls = verdict_.low_signal_outputs;
      if (std::find(ls.begin(), ls.end(), shape_.outputs[i].name) == ls.end())
        ls.push_back(shape_.outputs[i].name);
    }
    if (!c.pass) return context + c.message;
  }
  return {};
}

// Whether `key` is one of the shape's input sets (true: one of its correctness seeds, usual and
// unspliced); tampering otherwise. Timed calls' sets: the last seed's and the timing seeds',
// spliced (variant >= 0) or not.
bool Judge::legit_set(const child::SetKey& key) {
  using child::SetKind;
  const ChildShape& item = task_.shapes[index_];
  const uint64_t seed = key.seed;
  const bool own_seed = std::find(item.seeds.begin(), item.seeds.end(), seed) != item.seeds.end();
  bool timing_set = item.performance && seed == item.seeds.back();
  for (int k = 1; k < child::kMaxRotationSets && item.performance; ++k)
    timing_set = timing_set || seed == child::timing_seed(item.seeds.back(), k);
  bool legit = false;
  switch (key.kind) {
    case SetKind::kUsual:
      legit =
          key.variant < 0 ? own_seed || timing_set : timing_set && key.variant < child::kMaxVariant;
      break;
    case SetKind::kRangeProbe:
      legit = probe_required_ && key.variant < 0 &&
              seed == (item.seeds.front() ^ child::kRangeProbeSeedMix);
      break;
    case SetKind::kEdgeCase:
      legit = edge_required_ && key.variant < 0 &&
              seed == (item.seeds.front() ^ child::kEdgeCaseSeedMix);
      break;
  }
  if (!legit)
    throw Stop{true, fmt::format("a check of shape {} on input set {:#x} ({}, variant {}) that is "
                                 "not one of the shape's",
                                 item.shape_id, seed, child::set_kind_name(key.kind), key.variant)};
  return own_seed && key.kind == SetKind::kUsual && key.variant < 0;
}

bool Judge::choose_recheck(int calls) {
  const bool first = verdict_.timed_rechecks == 0 && timed_calls_ <= recheck_after_calls_ &&
                     timed_calls_ + calls > recheck_after_calls_;
  timed_calls_ += calls;
  if (first) return true;
  if (verdict_.timed_rechecks == 0) return false;
  if (verdict_.brackets_hold_work) {
    const bool frequent = verdict_.timed_rechecks < kFrequentTimedRechecksHoldingWork;
    return rng_() % (frequent ? kRecheckOddsHoldingWork : kLaterRecheckOddsHoldingWork) == 0;
  }
  return verdict_.timed_rechecks < kMaxTimedRechecks && rng_() % kRecheckOdds == 0;
}

void Judge::check(const child::SetKey& key, const std::string& context, bool inputs) {
  const ChildShape& item = task_.shapes[index_];
  if (inputs != inputs_due_)
    throw Stop{true, fmt::format("a check of shape {} {} the candidate's inputs where the judge "
                                 "{} them (a shape's first check, the first after its timed "
                                 "calls and the re-checks of timed calls carry them; for the "
                                 "others the judge asks)",
                                 item.shape_id, inputs ? "with" : "without",
                                 inputs_due_ ? "needs" : "does not take")};
  inputs_due_ = false;
  const bool own_seed = legit_set(key);
  const bool timed_recheck = in_timing_;
  if (timed_recheck && key.variant < 0)
    throw Stop{true, "a re-check of a timed call on inputs without its splice"};
  recheck_pending_ = false;
  if (verdict_.status == EvalStatus::kWrongResult)
    throw Stop{true, fmt::format("a check of shape {} after a failed one", item.shape_id)};
  InputSet& set = input_set(key);
  // What the child published: the inputs when it carries them, then the outputs, from offset 0;
  // the inputs the judge asks for after the check came follow the outputs.
  off_t offset = 0;
  auto read_into = [&](std::vector<uint8_t>& b) {
    for (size_t done = 0; done < b.size();) {
      const ssize_t n = ::pread(shared_, b.data() + done, b.size() - done,
                                offset + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw Stop{true, fmt::format("the buffers published for shape {} end at byte {} of the "
                                     "shape's tensors",
                                     item.shape_id, offset + static_cast<off_t>(done))};
      done += static_cast<size_t>(n);
    }
    offset += static_cast<off_t>(b.size());
  };
  candidate_on_host_ = false;
  if (device_arena_) {
    // Nothing was published: the judge reads the arena, the inputs at every check.
    inputs = true;
  } else {
    if (inputs)
      for (auto& b : host_in_) read_into(b);
    for (auto& b : host_out_) read_into(b);
  }
  if (!inputs && rng_() % kInputCheckOdds == 0) {
    reply(judge_inputs_request());
    const auto answer = read_message();
    if (!answer)
      throw Stop{false, fmt::format("the child ended before publishing the inputs of shape {} the "
                                    "judge asked for",
                                    item.shape_id)};
    if (*answer != judge_inputs_published())
      throw Stop{true, fmt::format("the judge asked for the inputs of shape {} and got {}",
                                   item.shape_id, printable_text(answer->dump().substr(0, 200)))};
    for (auto& b : host_in_) read_into(b);
    inputs = true;
  }
  if (!dev_.host_memory() && !device_arena_) {
    for (size_t i = 0; inputs && i < host_in_.size(); ++i)
      device(dev_.from_host(cand_in_[i], host_in_[i].data(), host_in_[i].size()), "copy");
    for (size_t i = 0; i < host_out_.size(); ++i)
      device(dev_.from_host(cand_out_[i], host_out_[i].data(), host_out_[i].size()), "copy");
  }
  std::string failure = check_bracket(key, context);
  if (failure.empty()) failure = compare(set, context, inputs);
  if (failure.empty() && verdict_.brackets_hold_work && key.variant >= 0 &&
      !last_bracket_checked_) {
    verdict_.checked_brackets.push_back(static_cast<int>(brackets_.size()) - 1);
    last_bracket_checked_ = true;
  }
  ++verdict_.checks;
  if (timed_recheck) ++verdict_.timed_rechecks;
  if (verdict_.timed) {
    ++verdict_.post_timing_checks;
    post_timing_sets_.emplace(key.seed, static_cast<int>(key.kind));
    verdict_.post_timing_sets = static_cast<int>(post_timing_sets_.size());
  }
  if (!failure.empty()) {
    verdict_.status = EvalStatus::kWrongResult;
    verdict_.error = failure;
    reply(to_json(JudgeCheckReply{false, failure}));
    return;
  }
  if (own_seed && !verdict_.timed && !in_timing_) passed_seeds_.insert(key.seed);
  if (key.kind == child::SetKind::kEdgeCase)
    verdict_.edge_case = child::edge_case_description(*def_);
  if (key.kind == child::SetKind::kRangeProbe) {
    std::string scaled;
    for (const auto& name : def_->range_probe.inputs) scaled += (scaled.empty() ? "" : ", ") + name;
    verdict_.range_probe = fmt::format("{} scaled by 2^{}", scaled, def_->range_probe.exponent);
  }
  reply(to_json(JudgeCheckReply{true, ""}));
}

void Judge::finish_shape(EvalStatus claimed) {
  const ChildShape& item = task_.shapes[index_];
  verdict_.claimed = claimed;
  verdict_.seeds_passed = static_cast<int>(passed_seeds_.size());
  // A shape may end inside its timed calls (or with a re-check asked for and not made) only
  // with a verdict that scores nothing: a failed re-check, or the child's own failure (the
  // candidate returned an error, wrote out of bounds, a device error).
  if ((in_timing_ || recheck_pending_) && claimed == EvalStatus::kOk)
    throw Stop{true, recheck_pending_
                         ? "a shape reported ok without the re-check of a timed call the judge "
                           "asked for"
                         : "a shape ended inside its timed calls"};
  in_timing_ = recheck_pending_ = false;
  if (verdict_.status != EvalStatus::kWrongResult) {
    std::vector<std::string> missing;
    for (uint64_t s : item.seeds) {
      if (!passed_seeds_.count(s)) {
        missing.push_back("the correctness seeds");
        break;
      }
    }
    if (probe_required_ && verdict_.range_probe.empty()) missing.push_back("the range probe");
    if (edge_required_ && verdict_.edge_case.empty()) missing.push_back("the edge-case set");
    if (item.performance && !verdict_.timed) missing.push_back("the timed calls");
    if (item.performance && verdict_.timed_rechecks == 0)
      missing.push_back("the re-check of a timed call");
    if (item.performance && verdict_.post_timing_checks < 2)
      missing.push_back("the checks after timing");
    if (missing.empty()) {
      verdict_.status = EvalStatus::kOk;
    } else {
      std::string m;
      for (const auto& s : missing) m += (m.empty() ? "" : ", ") + s;
      verdict_.status = EvalStatus::kRejected;
      verdict_.error = fmt::format("the judge saw no check of {} ({} checked calls)", m,
                                   verdict_.checks);
    }
  }
  write_verdict(verdict_);
  leave_shape();
}

void Judge::handle(const Json& message) {
  const auto arrived = Clock::now();  // a call_end's bracket ends here, before the parse
  auto parsed = judge_message_from_json(message, "a message to the judge");
  if (!parsed) throw Stop{true, parsed.error().message};
  // After the judge asked to re-check a timed call, only that check may come.
  if (recheck_pending_ && !std::holds_alternative<JudgeCheck>(*parsed) &&
      !std::holds_alternative<JudgeShapeEnd>(*parsed))
    throw Stop{true, fmt::format("the timed call the judge chose to re-check was not published "
                                 "(\"{}\" came instead)",
                                 message.value("op", std::string()))};
  if (const auto* prep = std::get_if<JudgePrepare>(&*parsed)) {
    current(prep->shape_id);
    if (in_timing_) throw Stop{true, "an input set prepared inside the timed calls"};
    legit_set(prep->key);
    input_set(prep->key);
  } else if (const auto* chk = std::get_if<JudgeCheck>(&*parsed)) {
    current(chk->shape_id);
    if (in_timing_ && !recheck_pending_) throw Stop{true, "a check inside the timed calls"};
    check(chk->key, chk->context, chk->inputs);
  } else if (const auto* begin = std::get_if<JudgeTimingBegin>(&*parsed)) {
    const ChildShape& item = current(begin->shape_id);
    if (!item.performance || in_timing_ || verdict_.timed)
      throw Stop{true, fmt::format("timed calls of shape {} not asked for, or twice", begin->shape_id)};
    // The calibration: one timed sample's cost beyond the call, on this process's device and
    // clock, with this shape's output reset (and input copy) standing in for the child's.
    InputSet* from = sets_[0].filled ? &sets_[0] : sets_[1].filled ? &sets_[1] : nullptr;
    auto reset = [&]() -> Status {
      for (size_t i = 0; i < calib_out_.size(); ++i)
        ATREX_TRY(dev_.fill(calib_out_[i], 0xFF, shape_.outputs[i].bytes()));
      for (size_t i = 0; from && i < calib_in_.size(); ++i)
        ATREX_TRY(dev_.copy(calib_in_[i], from->in[i], shape_.inputs[i].bytes()));
      return ok();
    };
    device(dev_.bracket_overhead(reset, verdict_.bracket_overhead_us), "calibrating timing");
    verdict_.bracket_latency_us = wake_up_latency_us(ping_, pong_);
    in_timing_ = true;
    timed_calls_ = 0;
    recheck_after_calls_ = static_cast<int64_t>(
        rng_() % static_cast<uint64_t>(std::max(1, task_.timing.min_iterations)));
    reply(judge_go());
  } else if (std::holds_alternative<JudgeCallBegin>(*parsed)) {
    call_begin();
  } else if (const auto* done = std::get_if<JudgeCallEnd>(&*parsed)) {
    call_end(*done, arrived);
  } else if (std::holds_alternative<JudgeTimingEnd>(*parsed)) {
    if (!in_timing_ || bracket_open_) throw Stop{true, "timed calls ended that never began"};
    in_timing_ = false;
    inputs_due_ = true;
    verdict_.timed = true;
  } else if (const auto* end = std::get_if<JudgeShapeEnd>(&*parsed)) {
    current(end->shape_id, false);
    finish_shape(end->status);
  } else {
    // JudgeInputsPublished: only ever an answer to the judge's request (check()).
    throw Stop{true, "inputs published that the judge did not ask for"};
  }
}

std::string Judge::check_bracket(const child::SetKey& key, const std::string& context) {
  if (!verdict_.brackets_hold_work || key.variant < 0) return {};
  if (brackets_.empty() || key.variant != brackets_.back().splice)
    throw Stop{true, fmt::format("a check of timed-call inputs spliced with {} where the judge's "
                                 "last go named {}",
                                 key.variant, brackets_.empty() ? -1 : brackets_.back().splice)};
  size_t read = 0, differ = 0;
  for (size_t i = 0; i < host_out_.size(); ++i) {
    const std::vector<uint8_t>& published = host_out_[i];
    const std::vector<uint8_t>& then = done_read_.bytes[i];
    size_t from = 0;
    for (uint64_t at : done_read_.at[i]) {
      const size_t n = std::min<size_t>(kLineBytes, published.size() - at);
      differ += std::memcmp(published.data() + at, then.data() + from, n) != 0;
      from += n;
      ++read;
    }
  }
  if (differ == 0) return {};
  return context +
         fmt::format("the outputs checked are not the ones the timed call had when its done "
                     "reached the judge ({} of the {} lines of {} bytes the judge read then "
                     "differ): work finished outside the judge's bracket, e.g. by a thread after "
                     "the call returned",
                     differ, read, kLineBytes);
}

void Judge::read_done_outputs() {
  if (!arena_map_) {
    auto m = map_shared_memfd(shared_, false);
    if (!m) throw Stop{false, "judge: " + m.error().message};
    arena_map_ = m->data;
    arena_map_bytes_ = m->bytes;
  }
  if (layout_.total > arena_map_bytes_)
    throw Stop{false, fmt::format("judge: the shared memfd holds {} bytes, the output arena ends "
                                  "at byte {}",
                                  arena_map_bytes_, layout_.total)};
  const size_t n = shape_.outputs.size();
  uint64_t total = 0;
  for (const auto& t : shape_.outputs) total += t.bytes();
  const bool whole = total <= kWholeReadBytes;
  done_read_.at.assign(n, {});
  done_read_.bytes.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* out = arena_map_ + layout_.output[i];
    const size_t bytes = shape_.outputs[i].bytes();
    const uint64_t lines = (bytes + kLineBytes - 1) / kLineBytes;
    if (lines == 0) continue;
    // Every line in order, or this output's share of the lines (at least one) at places drawn
    // now.
    const uint64_t count =
        whole ? lines
              : std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(kReadLines) *
                                                            static_cast<double>(bytes) /
                                                            static_cast<double>(total)));
    done_read_.bytes[i].reserve(whole ? bytes : count * kLineBytes);
    for (uint64_t k = 0; k < count; ++k) {
      const uint64_t at = (whole ? k : rng_() % lines) * kLineBytes;
      const size_t len = std::min<size_t>(kLineBytes, bytes - at);
      done_read_.at[i].push_back(at);
      done_read_.bytes[i].insert(done_read_.bytes[i].end(), out + at, out + at + len);
    }
  }
}

void Judge::call_begin() {
  if (!in_timing_ || bracket_open_) throw Stop{true, "a timed call outside the timed calls"};
  bracket_open_ = true;
  go_splice_ = static_cast<int64_t>(rng_() % static_cast<uint64_t>(kJudgeSpliceLimit));
  bracket_start_ = Clock::now();
  reply(to_json(JudgeCallGo{go_splice_}));
}

void Judge::call_end(const JudgeCallEnd& m, Clock::time_point now) {
  if (!bracket_open_) throw Stop{true, "a timed call ended that never began"};
  // A bracket holds one call, or one graph replay of the batch the child captures
  // (shape_measure.cpp: clamp(min_iterations, 1, 50)); on cpu, where each bracket's work is
  // checked, always one. Any other count is the child's invention (attack round 3: relays that
  // claimed 1000 calls a bracket divided every bracket's bound by 1000 and bent the clock 850x).
  const int batch = std::clamp(task_.timing.min_iterations, 1, 50);
  if (m.calls != 1 && (verdict_.brackets_hold_work || m.calls != batch))
    throw Stop{true, fmt::format("a timed call's done claims {} calls in its bracket (1{} "
                                 "expected)",
                                 m.calls,
                                 verdict_.brackets_hold_work ? "" : fmt::format(" or {}", batch))};
  bracket_open_ = false;
  verdict_.bracket_us.push_back(
      std::chrono::duration<double, std::micro>(now - bracket_start_).count());
  verdict_.bracket_calls.push_back(m.calls);
  brackets_.push_back(Bracket{go_splice_});
  if (verdict_.brackets_hold_work) read_done_outputs();
  last_bracket_checked_ = false;
  recheck_pending_ = choose_recheck(m.calls);
  if (recheck_pending_) inputs_due_ = true;
  reply(to_json(JudgeCallEndReply{recheck_pending_}));
}

// Twice the median round trip of kJudgeStartPings (15) one-byte pings to the runner's echo
// thread (another process, woken as the child is woken by a go and as the judge is woken by a
// done): the two wake-ups a bracket holds, as this host schedules them now. Without the echo
// fds, between this thread and a helper of its own (which a loaded host schedules more kindly:
// same process).
double wake_up_latency_us(int ping_fd, int pong_fd) {
  int ping[2] = {-1, -1}, pong[2] = {-1, -1};
  std::thread echo;
  if (ping_fd < 0 || pong_fd < 0) {
    if (::pipe(ping) != 0) return 0;
    if (::pipe(pong) != 0) {
      close_fd(ping[0]);
      close_fd(ping[1]);
      return 0;
    }
    echo = std::thread([&] {
      char b;
      while (::read(ping[0], &b, 1) == 1) {
        if (::write(pong[1], &b, 1) != 1) break;
      }
    });
    ping_fd = ping[1];
    pong_fd = pong[0];
  }
  std::vector<double> trips;
  for (int k = 0; k < kJudgeStartPings; ++k) {
    char b = 'p';
    const auto t0 = Clock::now();
    if (::write(ping_fd, &b, 1) != 1 || ::read(pong_fd, &b, 1) != 1) break;
    trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  if (echo.joinable()) {
    close_fd(ping[1]);  // the helper's read sees EOF
    echo.join();
    close_fd(ping[0]);
    close_fd(pong[0]);
    close_fd(pong[1]);
  }
  if (trips.empty()) return 0;
  std::sort(trips.begin(), trips.end());
  return 2 * trips[trips.size() / 2];
}

int Judge::run() {
  begin_verdict();
  try {
    for (;;) {
      const auto message = read_message();
      if (!message) return 0;
      handle(*message);
      if (verdict_broken_) return 1;
    }
  } catch (const Stop& stop) {
    JudgeVerdict v = verdict_;
    if (index_ < task_.shapes.size()) v.shape_id = task_.shapes[index_].shape_id;
    if (stop.tampering) {
      v.status = EvalStatus::kRejected;
      v.tampering = stop.why;
    } else {
      v.status = EvalStatus::kCrashed;
      v.error = stop.why;
    }
    write_verdict(v);
    // The child waits for an answer: a failed check, so that it stops the shape.
    reply(judge_stop(stop.why));
    fmt::print(stderr, "{}\n", stop.why);
    if (!stop.tampering) std::_Exit(3);  // the device may be unusable
    return 0;
  }
}

}  // namespace

void judge_prelude(int argc, char** argv) {
  bool judge = false;
  int ping_fd = -1, pong_fd = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--judge") == 0) judge = true;
    if (i + 1 < argc && std::strcmp(argv[i], "--ping-fd") == 0) ping_fd = std::atoi(argv[i + 1]);
    if (i + 1 < argc && std::strcmp(argv[i], "--pong-fd") == 0) pong_fd = std::atoi(argv[i + 1]);
  }
  if (judge && ping_fd >= 0 && pong_fd >= 0)
    g_start_latency_us = wake_up_latency_us(ping_fd, pong_fd);
}

namespace {

// The device arena for the task's largest shape, offered to the child on `socket` (none where
// the device shares no memory, or cannot allocate it: the memfd copies stay then). The arena holds
// only the child's own buffers: the references stay in the judge's memory.
ChildDevice::SharedMemory offer_device_arena(const ChildTaskRequest& task, ChildDevice& device,
                                             int socket) {
  ChildDevice::SharedMemory arena;
  if (socket < 0) return arena;
  uint64_t bytes = 0;
  const auto* def = problems::find_native_operator(task.operator_name);
  for (size_t i = 0; def && !device.host_memory() && !device.brackets_hold_work() &&
                     i < task.shapes.size();
       ++i) {
    problems::Shape shape;
    shape.id = task.shapes[i].shape_id;
    shape.params = task.shapes[i].params;
    if (auto resolved = problems::resolve_shape(*def, shape))
      bytes = std::max(bytes, device_arena_layout(*resolved).total);
  }
  if (bytes > 0) {
    if (auto made = device.create_shared(bytes)) {
      arena = *made;
    } else if (made.error().code != ErrorCode::kUnavailable) {
      fmt::print(stderr, "judge: no device arena, the checks copy through the host: {}\n",
                 made.error().message);
      (void)device.synchronize();  // clears a recoverable out-of-memory error
    }
  }
  if (auto sent = send_arena_offer(socket, ArenaOffer{arena.bytes, arena.fd}); !sent) {
    fmt::print(stderr, "judge: {}\n", sent.error().message);
    arena = {};
  }
  if (arena.fd >= 0) ::close(arena.fd);
  arena.fd = -1;
  return arena;
}

}  // namespace

int run_judge_task(const ChildTaskRequest& task, ChildDevice& device, int verdict_fd,
                   int check_in_fd, int check_out_fd, int shared_fd, int ping_fd, int pong_fd,
                   int arena_fd) {
  ::signal(SIGPIPE, SIG_IGN);
  // Before the filter: the driver's export of the handle may need what the filter refuses.
  const ChildDevice::SharedMemory arena = offer_device_arena(task, device, arena_fd);
  if (task.seccomp) {
    if (auto s = install_candidate_seccomp(); !s) {
      fmt::print(stderr, "the judge refuses to run: {}\n", s.error().message);
      return 5;
    }
  }
  Judge judge(task, device, verdict_fd, check_in_fd, check_out_fd, shared_fd, ping_fd, pong_fd,
              arena, arena.ptr ? arena_fd : -1);
  if (!arena.ptr && arena_fd >= 0) ::close(arena_fd);
  return judge.run();
}

}  // namespace atrex::runner
