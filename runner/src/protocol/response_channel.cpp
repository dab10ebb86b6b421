#include "protocol/response_channel.h"

#include <sys/random.h>

#include <cerrno>

#include <fmt/format.h>

#include "atrex/common/untrusted_json.h"

namespace atrex::runner {

std::string make_nonce() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    ATREX_ASSERT(n > 0, "getrandom failed");
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : b) hex += fmt::format("{:02x}", c);
  return hex;
}

ResponseChannel::ResponseChannel(std::string nonce, std::vector<std::string> shape_ids,
                                 size_t max_bytes)
    : nonce_(std::move(nonce)), shape_ids_(std::move(shape_ids)), max_bytes_(max_bytes) {
  ATREX_ASSERT(!nonce_.empty(), "a result channel needs a nonce");
}

std::vector<ChildShapeResponse> ResponseChannel::feed(std::string_view bytes) {
  std::vector<ChildShapeResponse> out;
  if (tampered()) return out;
  bytes_ += bytes.size();
  if (bytes_ > max_bytes_) {
    why_ = fmt::format("more than {} bytes on the result channel", max_bytes_);
    return out;
  }
  partial_.append(bytes);
  size_t start = 0;
  for (size_t nl; !tampered() && (nl = partial_.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    take(std::string_view(partial_).substr(start, nl - start), out);
  }
  partial_.erase(0, start);
  if (tampered()) out.clear();
  return out;
}

void ResponseChannel::finish() {
  if (!tampered() && !partial_.empty()) {
    why_ = fmt::format("an unfinished line on the result channel ({} bytes)", partial_.size());
  }
}

void ResponseChannel::take(std::string_view line, std::vector<ChildShapeResponse>& out) {
  const size_t n = accepted_ + 1;
  if (accepted_ >= shape_ids_.size()) {
    why_ = fmt::format("line {} on the result channel, for {} requested shape(s)", n,
                       shape_ids_.size());
    return;
  }
  auto parsed = parse_untrusted_json(line);
  if (!parsed) {
    why_ = fmt::format("line {} on the result channel is {}", n,
                       parsed.error().message == "not JSON" ? parsed.error().message
                                                            : "JSON " + parsed.error().message);
    return;
  }
  Json& j = *parsed;
  // The nonce first: a line without it says nothing else worth reading.
  if (!j.is_object() || !j.contains("nonce") || j["nonce"] != nonce_) {
    why_ = fmt::format("line {} on the result channel does not carry the child's nonce", n);
    return;
  }
  auto c = child_shape_response_from_json(j, "result channel");
  if (!c) {
    why_ = fmt::format("line {} on the result channel: {}", n, c.error().message);
    return;
  }
  if (c->shape_id != shape_ids_[accepted_]) {
    why_ = fmt::format("line {} on the result channel is a verdict for shape {} where {} was next",
                       n, c->shape_id, shape_ids_[accepted_]);
    return;
  }
  ++accepted_;
  out.push_back(std::move(*c));
}

JudgeChannel::JudgeChannel(std::string nonce, std::vector<std::string> shape_ids, size_t max_bytes)
    : nonce_(std::move(nonce)), shape_ids_(std::move(shape_ids)), max_bytes_(max_bytes) {
  ATREX_ASSERT(!nonce_.empty(), "a judge channel needs a nonce");
}

std::vector<JudgeVerdict> JudgeChannel::feed(std::string_view bytes) {
  std::vector<JudgeVerdict> out;
  if (broken()) return out;
  bytes_ += bytes.size();
  if (bytes_ > max_bytes_) {
    why_ = fmt::format("more than {} bytes on the judge's channel", max_bytes_);
    return out;
  }
  partial_.append(bytes);
  size_t start = 0;
  for (size_t nl; !broken() && (nl = partial_.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    take(std::string_view(partial_).substr(start, nl - start), out);
  }
  partial_.erase(0, start);
  if (broken()) out.clear();
  return out;
}

void JudgeChannel::finish() {
  if (!broken() && !partial_.empty()) {
    why_ = fmt::format("an unfinished line on the judge's channel ({} bytes)", partial_.size());
  }
}

void JudgeChannel::take(std::string_view line, std::vector<JudgeVerdict>& out) {
  const size_t n = accepted_ + 1;
  auto parsed = parse_untrusted_json(line);
  if (!parsed) {
    why_ = fmt::format("judge's line {} is {}", n,
                       parsed.error().message == "not JSON" ? parsed.error().message
                                                            : "JSON " + parsed.error().message);
    return;
  }
  Json& j = *parsed;
  if (!j.is_object() || !j.contains("nonce") || j["nonce"] != nonce_) {
    why_ = fmt::format("judge's line {} does not carry the judge's nonce", n);
    return;
  }
  auto v = judge_verdict_from_json(j, "judge channel");
  if (!v) {
    why_ = fmt::format("judge's line {}: {}", n, v.error().message);
    return;
  }
  // The judge's last line when the child's messages broke its protocol: it may come at any
  // point (or after the last shape), and it decides the task.
  if (!v->tampering.empty()) {
    out.push_back(std::move(*v));
    return;
  }
  if (accepted_ >= shape_ids_.size()) {
    why_ = fmt::format("judge's line {}, for {} requested shape(s)", n, shape_ids_.size());
    return;
  }
  if (v->shape_id != shape_ids_[accepted_]) {
    why_ = fmt::format("judge's line {} is a verdict for shape {} where {} was next", n,
                       v->shape_id, shape_ids_[accepted_]);
    return;
  }
  ++accepted_;
  out.push_back(std::move(*v));
}

}  // namespace atrex::runner
