// The judge's checks (judge_core.h): input sets drawn and referenced in this process, the
// comparison of what the child published (or keeps in the device arena) with them, and what
// the judge reads at a timed call's done.
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "atrex/common/text.h"
#include "judge_core.h"

namespace atrex::runner::judge_detail {

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
  if (device_arena_) {
    const bool frequent = verdict_.timed_rechecks < kFrequentTimedRechecksInArena;
    return rng_() % (frequent ? kRecheckOddsInArena : kLaterRecheckOddsInArena) == 0;
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
    if (!m) throw Stop{false, "judge: " + m.error().message, true};
    arena_map_ = m->data;
    arena_map_bytes_ = m->bytes;
  }
  if (layout_.total > arena_map_bytes_)
    throw Stop{false,
               fmt::format("judge: the shared memfd holds {} bytes, the output arena ends at "
                           "byte {}",
                           arena_map_bytes_, layout_.total),
               true};
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


}  // namespace atrex::runner::judge_detail
