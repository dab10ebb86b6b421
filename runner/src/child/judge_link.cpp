#include "judge_link.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "atrex/common/wire/judge_messages.h"

namespace atrex::runner::child {

namespace {

Status write_all(int fd, const void* data, size_t n, off_t offset, bool positioned) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < n;) {
    const ssize_t w = positioned
                          ? ::pwrite(fd, p + done, n - done, offset + static_cast<off_t>(done))
                          : ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error(fmt::format("writing to the judge: {}", std::strerror(errno)));
    done += static_cast<size_t>(w);
  }
  return ok();
}

}  // namespace

JudgeLink::~JudgeLink() {
  if (pinned_by_) pinned_by_->unpin_host(map_);
  if (map_) ::munmap(map_, map_bytes_);
}

Status JudgeLink::map(ChildDevice& dev) {
  if (shared_ < 0) return io_error("no judge: the child was started without --shared-fd");
  if (map_) return ok();
  ATREX_ASSIGN_OR_RETURN(MemfdMapping m, map_shared_memfd(shared_, true));
  map_ = m.data;
  map_bytes_ = m.bytes;
  // Every check copies the shape's tensors from the device into this mapping.
  if (map_ && dev.pin_host(map_, map_bytes_)) pinned_by_ = &dev;
  return ok();
}

Result<uint8_t*> JudgeLink::output_arena(ChildDevice& dev, const SharedLayout& layout) {
  ATREX_TRY(map(dev));
  if (layout.total > map_bytes_)
    return io_error(fmt::format("the shared memfd holds {} bytes, the shape's output arena ends at "
                                "byte {}",
                                map_bytes_, layout.total));
  return map_;
}

// Mapped, not written: RLIMIT_FSIZE (64 MiB) bounds write(2) offsets even inside a file's size,
// and a shape's buffers are often larger. The runner sized the memfd for the largest shape.
Status JudgeLink::publish(ChildDevice& dev,
                          const std::vector<std::pair<const void*, size_t>>& buffers,
                          size_t from) {
  if (arena_) return ok();
  ATREX_TRY(map(dev));
  size_t offset = from;
  for (const auto& [ptr, bytes] : buffers) {
    if (offset + bytes > map_bytes_)
      return io_error(fmt::format("the shared memfd holds {} bytes, the shape's buffers more",
                                  map_bytes_));
    if (dev.host_memory())
      std::memcpy(map_ + offset, ptr, bytes);
    else
      ATREX_TRY(dev.to_host(map_ + offset, ptr, bytes));
    offset += bytes;
  }
  return ok();
}

Status JudgeLink::send(const Json& message) {
  if (out_ < 0) return io_error("no judge: the child was started without --judge-out");
  const std::string line = message.dump() + "\n";
  return write_all(out_, line.data(), line.size(), 0, false);
}

Result<Json> JudgeLink::receive() {
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      const std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      try {
        return Json::parse(line);
      } catch (const Json::exception& e) {
        return io_error(fmt::format("the judge's reply does not parse: {}", e.what()));
      }
    }
    char buf[4096];
    const ssize_t n = ::read(in_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(fmt::format("reading the judge's reply: {}", std::strerror(errno)));
    if (n == 0) return io_error("the judge is gone (its pipe closed)");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

Status JudgeLink::expect_go() {
  ATREX_ASSIGN_OR_RETURN(Json reply, receive());
  if (reply != judge_go()) return io_error("the judge did not answer go: " + reply.dump());
  return ok();
}

Status JudgeLink::prepare(const std::string& shape_id, const SetKey& key) {
  return send(to_json(JudgePrepare{shape_id, key}));
}

Result<std::string> JudgeLink::check(const std::string& shape_id, const SetKey& key,
                                     const std::string& context, bool inputs,
                                     const std::function<Status()>& publish_inputs) {
  ATREX_TRY(send(to_json(JudgeCheck{shape_id, key, context, inputs})));
  ATREX_ASSIGN_OR_RETURN(Json reply, receive());
  if (!inputs && reply == judge_inputs_request()) {
    ATREX_TRY(publish_inputs());
    ATREX_TRY(send(judge_inputs_published()));
    ATREX_ASSIGN_OR_RETURN(reply, receive());
  }
  auto answer = judge_check_reply_from_json(reply, "the judge's reply to a check");
  if (!answer) return io_error(answer.error().message);
  if (answer->pass) return std::string();
  return answer->error.empty() ? std::string("the judge's check failed") : answer->error;
}

Status JudgeLink::timing_begin(const std::string& shape_id) {
  ATREX_TRY(send(to_json(JudgeTimingBegin{shape_id})));
  return expect_go();
}

// Spins for the go (poll with a zero timeout, up to kGoSpin) instead of sleeping in read(2): the
// child has just burnt CPU (the cache flush before every timed call), and on a busy host such a
// process, once asleep, is woken late: milliseconds that lie inside the judge's bracket
// (docs/evaluation.md "The floor"). Only the honest harness gains by it: a bracket is never
// shorter than the work it holds.
void JudgeLink::spin_for_reply() {
  constexpr auto kGoSpin = std::chrono::milliseconds(50);
  const auto until = std::chrono::steady_clock::now() + kGoSpin;
  while (pending_.find('\n') == std::string::npos && std::chrono::steady_clock::now() < until) {
    struct pollfd p {in_, POLLIN, 0};
    const int n = ::poll(&p, 1, 0);
    if (n != 0) return;  // readable (or an error, which the read reports)
  }
}

int64_t JudgeLink::call_begin() {
  if (!sticky_.empty()) return -1;
  Status s = send(to_json(JudgeCallBegin{}));
  if (s) {
    spin_for_reply();
    auto reply = receive();
    if (!reply) {
      s = tl::unexpected(reply.error());
    } else if (auto go = judge_call_go_from_json(*reply, "the judge's go")) {
      return go->splice;
    } else {
      s = tl::unexpected(go.error());
    }
  }
  sticky_ = s.error().message;
  return -1;
}

// Waits for the judge's acknowledgement: this process then sleeps while the judge takes its
// timestamp (and, on cpu, reads the outputs in the arena), so the judge wakes at once (a
// hand-off) instead of waiting for a busy CPU, which on a loaded host added milliseconds to
// every bracket; and the harness touches no output before the judge has read them.
void JudgeLink::call_end(int calls) {
  if (!sticky_.empty()) return;
  Status s = send(to_json(JudgeCallEnd{calls}));
  if (s) {
    auto reply = receive();
    if (!reply) {
      s = tl::unexpected(reply.error());
    } else if (auto answer = judge_call_end_reply_from_json(*reply, "the judge's answer to a done")) {
      recheck_ = answer->check;
    } else {
      s = tl::unexpected(answer.error());
    }
  }
  if (!s) sticky_ = s.error().message;
}

Status JudgeLink::timing_end() { return send(to_json(JudgeTimingEnd{})); }

Status JudgeLink::shape_end(const std::string& shape_id, EvalStatus claimed) {
  return send(to_json(JudgeShapeEnd{shape_id, claimed}));
}

}  // namespace atrex::runner::child
